package broker

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/commonpb"
	"github.com/strata-log/strata/proto/metadpb"
)

// flakyMetad serves one key the way metad does during elections: a write
// may be applied and its answer lost (LEADERSHIP_LOST), a read may find no
// leader.
type flakyMetad struct {
	metadpb.UnimplementedMetadServer
	mu sync.Mutex
	// getFailures and lostPuts count down the calls that fail.
	getFailures, lostPuts int
	value                 []byte
	puts                  int
}

func (f *flakyMetad) Get(_ context.Context, req *metadpb.GetRequest) (*metadpb.GetResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.getFailures > 0 {
		f.getFailures--
		return nil, rpcerror.Error(codes.Unavailable, &commonpb.ErrorInfo{Reason: rpcerror.ReasonNoLeader}, "no leader")
	}
	if f.value == nil {
		return &metadpb.GetResponse{}, nil
	}
	return &metadpb.GetResponse{Found: true, Kv: &metadpb.KeyValue{Key: req.Key, Value: f.value, Version: 1}}, nil
}

func (f *flakyMetad) Put(_ context.Context, req *metadpb.PutRequest) (*metadpb.PutResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.puts++
	conflict := req.HasExpectedVersion && req.ExpectedVersion == 0 && f.value != nil
	if !conflict {
		f.value = req.Value
	}
	if f.lostPuts > 0 { // the leader changed before it answered
		f.lostPuts--
		return nil, rpcerror.Error(codes.Unavailable, &commonpb.ErrorInfo{Reason: rpcerror.ReasonLeadershipLost}, "leadership lost while committing log")
	}
	if conflict {
		return nil, rpcerror.Error(codes.FailedPrecondition, &commonpb.ErrorInfo{Reason: rpcerror.ReasonVersionConflict}, "version conflict")
	}
	return &metadpb.PutResponse{Kv: &metadpb.KeyValue{Key: req.Key, Value: f.value, Version: 1}}, nil
}

// A broker reads the cluster's shared values (cluster id, tier key) and
// creates them only when missing, through metad's elections: a restart
// during one does not write (and so cannot fail on a lost answer), and a
// create whose answer was lost is read back.
func TestSharedValueThroughMetadElections(t *testing.T) {
	for _, tc := range []struct {
		name     string
		meta     *flakyMetad
		want     string
		wantPuts int
	}{
		{"exists: read, never written", &flakyMetad{value: []byte("old"), lostPuts: 1, getFailures: 2}, "old", 0},
		{"missing: created", &flakyMetad{}, "new", 1},
		{"missing: created, answer lost, read back", &flakyMetad{lostPuts: 1, getFailures: 1}, "new", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln := proctest.Listen(t)
			srv := grpc.NewServer()
			metadpb.RegisterMetadServer(srv, tc.meta)
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(srv.Stop)
			cl, err := metaclient.New(metaclient.Config{Endpoints: []string{ln.Addr().String()}, RequestTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cl.Close() })
			b := &Broker{meta: cl, log: slog.New(slog.DiscardHandler)}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			got, err := b.sharedValue(ctx, "/strata/tier/cluster-id", []byte("new"))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want || tc.meta.puts != tc.wantPuts {
				t.Fatalf("got %q after %d puts, want %q after %d", got, tc.meta.puts, tc.want, tc.wantPuts)
			}
		})
	}
}
