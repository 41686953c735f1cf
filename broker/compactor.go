package broker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-log/strata/broker/partlog"
	"github.com/strata-log/strata/broker/partlog/compaction"
	"github.com/strata-log/strata/tiering/compact"
)

// compactionMetrics are the broker's compaction counters (every pass of
// every partition it serves).
type compactionMetrics struct {
	runs              prometheus.Counter
	errors            prometheus.Counter
	bytesIn           prometheus.Counter
	bytesOut          prometheus.Counter
	recordsRemoved    prometheus.Counter
	tombstonesDropped prometheus.Counter
	duration          prometheus.Histogram
	// cleanerLag: the age of the oldest dirty cleanable data among the
	// compacted partitions served, as of the last round (Kafka's
	// max-compaction-delay).
	cleanerLag prometheus.Gauge
}

func newCompactionMetrics(reg prometheus.Registerer) *compactionMetrics {
	m := &compactionMetrics{
		runs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_compaction_runs_total", Help: "Compaction passes swapped in."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_compaction_errors_total", Help: "Compaction passes that failed or were abandoned (their outputs deleted)."}),
		bytesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_compaction_bytes_in_total", Help: "Batch bytes read and rewritten by compaction passes."}),
		bytesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_compaction_bytes_out_total", Help: "Batch bytes written by compaction passes."}),
		recordsRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_compaction_records_removed_total", Help: "Records removed by compaction: superseded keys and dropped tombstones."}),
		tombstonesDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_broker_compaction_tombstones_dropped_total", Help: "Tombstones dropped past their delete horizon (delete.retention.ms)."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_broker_compaction_duration_seconds", Help: "Time of a compaction pass, read to swap.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}),
		cleanerLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_broker_compaction_cleaner_lag_seconds",
			Help: "Age of the newest record of the oldest dirty cleanable ledger, over the compacted partitions this broker serves."}),
	}
	if reg != nil {
		reg.MustRegister(m.runs, m.errors, m.bytesIn, m.bytesOut, m.recordsRemoved, m.tombstonesDropped, m.duration, m.cleanerLag)
	}
	return m
}

// compactLoop is the broker's one compactor (DESIGN §7): every
// --compaction-check-interval it offers each served partition whose topic
// compacts a pass, one partition at a time, with one key map of
// --compaction-map-bytes (allocated at the first compacted partition and
// kept: its memory is the budget).
func (p *passes) compactLoop(ctx context.Context) {
	b := p.b
	t := time.NewTicker(b.cfg.CompactionCheckInterval)
	defer t.Stop()
	var m *compact.OffsetMap
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lagMs := int64(0)
		for _, l := range b.passes.compactedLogs() {
			if ctx.Err() != nil {
				return
			}
			if m == nil {
				m = compact.NewOffsetMap(int(b.cfg.CompactionMapBytes))
			}
			res, err := compaction.Compact(ctx, l, compaction.Options{Map: m, MaxDuration: b.cfg.OrphanLedgerGrace / 2,
				BufferBytes: b.cfg.CompactionBufferBytes, MaxBytesPerSec: float64(b.cfg.CompactionMaxBytesPerSecond)})
			b.passes.recordCompaction(res, err)
			if err != nil && ctx.Err() == nil && !errors.Is(err, partlog.ErrClosed) {
				b.log.Warn("compaction failed", "err", err)
			}
			if res.OldestDirtyMs >= 0 && !res.Ran {
				lagMs = max(lagMs, time.Now().UnixMilli()-res.OldestDirtyMs)
			}
		}
		b.compaction.cleanerLag.Set(float64(lagMs) / 1000)
	}
}

// compactedLogs are the served logs whose topic compacts, in a stable order.
func (p *passes) compactedLogs() []*partlog.Log {
	b := p.b
	b.mu.Lock()
	var keys []tp
	for k, p := range b.parts {
		if p.log != nil {
			keys = append(keys, k)
		}
	}
	b.mu.Unlock()
	slices.SortFunc(keys, func(a, c tp) int {
		if a.topic != c.topic {
			if a.topic < c.topic {
				return -1
			}
			return 1
		}
		return int(a.partition - c.partition)
	})
	var out []*partlog.Log
	for _, k := range keys {
		tc, _, err := b.topicConfig(k.topic)
		if err != nil || !tc.Compacted() {
			continue
		}
		if l := b.serving(k); l != nil {
			out = append(out, l)
		}
	}
	return out
}

func (p *passes) recordCompaction(res compaction.Result, err error) {
	b := p.b
	m := b.compaction
	if err != nil {
		if !errors.Is(err, partlog.ErrClosed) {
			m.errors.Inc()
		}
		return
	}
	if !res.Ran {
		return
	}
	m.runs.Inc()
	m.bytesIn.Add(float64(res.Stats.BytesIn))
	m.bytesOut.Add(float64(res.Stats.BytesOut))
	m.recordsRemoved.Add(float64(res.Stats.RecordsRemoved))
	m.tombstonesDropped.Add(float64(res.Stats.TombstonesDropped))
	m.duration.Observe(res.Took.Seconds())
}
