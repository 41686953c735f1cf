package broker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/strata-log/strata/internal/grpcopts"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/proto/brokerpb"
)

// reportLag keeps strata_broker_group_lag_records current for the groups
// whose coordinator this broker is: committed offset vs the partition's
// high watermark (asked of its owner), every --lag-interval, summed per group and topic so the
// metric's cardinality stays at groups x topics. Per-partition lag, in
// records and in time, is in `strata group describe`.
func (p *passes) reportLag(ctx context.Context) {
	b := p.b
	t := time.NewTicker(b.cfg.LagInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.mu.Lock()
		var offsets []committed
		for _, p := range b.parts {
			if p.coord == nil {
				continue
			}
			for _, o := range p.coord.Offsets() {
				offsets = append(offsets, committed{o.Group, tp{o.Topic, o.Partition}, o.Offset})
			}
		}
		b.mu.Unlock()
		hws := map[tp]int64{}
		lag := map[[2]string]int64{}
		for _, o := range offsets {
			hw, ok := hws[o.k]
			if !ok {
				hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				var err error
				hw, err = b.passes.highWatermark(hctx, o.k)
				cancel()
				if err != nil {
					hw = -1
				}
				hws[o.k] = hw
			}
			if hw >= 0 {
				lag[[2]string{o.group, o.k.topic}] += max(hw-o.off, 0)
			}
		}
		b.metrics.lag.Reset()
		for k, v := range lag {
			b.metrics.lag.WithLabelValues(k[0], k[1]).Set(float64(v))
		}
	}
}

// committed is one group's committed offset of one partition.
type committed struct {
	group string
	k     tp
	off   int64
}

// highWatermark is a partition's high watermark: local when this broker
// serves it, otherwise asked of its owner.
func (p *passes) highWatermark(ctx context.Context, k tp) (int64, error) {
	b := p.b
	if l := b.serving(k); l != nil {
		return l.HighWatermark(), nil
	}
	addr := b.redirect(ErrNotOwner, k, "").Address
	if addr == "" {
		return 0, fmt.Errorf("%s has no owner", k)
	}
	conn, err := b.peers.conn(addr)
	if err != nil {
		return 0, err
	}
	resp, err := brokerpb.NewBrokerClient(conn).ListOffsets(ctx, &brokerpb.ListOffsetsRequest{Topic: k.topic, Partition: k.partition, Timestamp: -1})
	if err != nil {
		return 0, err
	}
	return resp.Offset, nil
}

// peerConns are connections to other brokers, one per address.
type peerConns struct {
	creds *mtls.Credentials // nil: plaintext
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func (p *peerConns) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.conns[addr]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(addr, append(grpcopts.DialOptions(), p.creds.DialOption())...)
	if err != nil {
		return nil, err
	}
	if p.conns == nil {
		p.conns = map[string]*grpc.ClientConn{}
	}
	p.conns[addr] = c
	return c, nil
}

func (p *peerConns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
