package wirecodec_test

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/internal/wirecodec"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/brokerpb"
)

// TestCodecIsRegistered: gRPC's "proto" codec is this one, and it sends
// an add's payload without copying it, decodes a produce request into
// memory of its own, and passes every other message to protobuf.
func TestCodecIsRegistered(t *testing.T) {
	c := encoding.GetCodecV2("proto")
	payload := bytes.Repeat([]byte("x"), 100<<10)
	add := &bookiepb.AddRequest{RequestId: 7, LedgerId: 3, EntryId: 9, Lac: -1, Payload: payload, Recovery: true}
	out, err := c.Marshal(add)
	if err != nil {
		t.Fatal(err)
	}
	referenced := false
	for _, b := range out {
		if d := b.ReadOnlyData(); len(d) > 0 && &d[0] == &payload[0] {
			referenced = true
		}
	}
	want, _ := proto.Marshal(add)
	if !referenced || !bytes.Equal(out.Materialize(), want) {
		t.Fatalf("AddRequest: payload referenced %v, encoding equal %v", referenced, bytes.Equal(out.Materialize(), want))
	}

	req := &brokerpb.ProduceRequest{Acks: brokerpb.Acks_ACKS_ALL, Partitions: []*brokerpb.ProducePartition{{Topic: "t", Partition: 2, Records: payload}}}
	enc, _ := proto.Marshal(req)
	pooled := mem.BufferSlice{mem.Copy(enc[:len(enc)/2], wirecodec.BufferPool), mem.Copy(enc[len(enc)/2:], wirecodec.BufferPool)}
	got := &brokerpb.ProduceRequest{}
	if err := c.Unmarshal(pooled, got); err != nil || !proto.Equal(got, req) {
		t.Fatalf("ProduceRequest: %v, %v", got, err)
	}
	// The decoded records survive the received buffers going back to
	// the pool and being reused (W3).
	pooled.Free()
	for range 4 {
		b := wirecodec.BufferPool.Get(len(enc) / 2)
		clear(*b)
		wirecodec.BufferPool.Put(b)
	}
	if !bytes.Equal(got.Partitions[0].Records, payload) {
		t.Fatal("decoded records changed when the received buffers were reused")
	}

	other := &bookiepb.ReadLACRequest{LedgerId: 5, PreviousLac: 4, WaitMs: 100}
	data, err := c.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	back := &bookiepb.ReadLACRequest{}
	if err := c.Unmarshal(data, back); err != nil || !proto.Equal(back, other) {
		t.Fatalf("ReadLACRequest: %v, %v", back, err)
	}
}

// TestBufferPool: BufferPool's capacity classes (bufpool's tests cover
// the pooling itself).
func TestBufferPool(t *testing.T) {
	for n, want := range map[int]int{0: 256, 4096: 4096, 16<<10 + 1: 32 << 10, 1<<20 + 1: 2 << 20, 2<<20 + 1: 2<<20 + 1} {
		b := wirecodec.BufferPool.Get(n)
		if len(*b) != n || cap(*b) != want {
			t.Fatalf("Get(%d): len %d cap %d, want cap %d", n, len(*b), cap(*b), want)
		}
		wirecodec.BufferPool.Put(b)
	}
}

// pooledAdd is an AddRequest decoded into a pooled buffer, as a bookie
// receives adds.
type pooledAdd struct {
	bookiepb.AddRequest
	wirecodec.Pooled
}

// TestPooledUnmarshal: a message embedding Pooled decodes as the plain
// one does, into a buffer of the pool's that it holds until Release, and
// a released buffer is handed out again.
func TestPooledUnmarshal(t *testing.T) {
	c := encoding.GetCodecV2("proto")
	payload := bytes.Repeat([]byte("entry "), 50<<10)
	add := &bookiepb.AddRequest{RequestId: 7, LedgerId: 3, EntryId: 9, Lac: -1, Payload: payload, PayloadTail: []byte("tag")}
	enc, err := c.Marshal(add)
	if err != nil {
		t.Fatal(err)
	}
	var want bookiepb.AddRequest
	if err := proto.Unmarshal(enc.Materialize(), &want); err != nil {
		t.Fatal(err)
	}
	got := new(pooledAdd)
	if err := c.Unmarshal(enc, got); err != nil || !proto.Equal(&got.AddRequest, &want) {
		t.Fatalf("pooled decode: %v, %v", &got.AddRequest, err)
	}
	if string(got.Entry()) != string(payload)+"tag" {
		t.Fatal("pooled decode: the entry differs")
	}
	released := map[*byte]bool{&got.Payload[0]: true}
	got.Release()
	got.Release() // idempotent
	// The pool hands a released buffer out again. sync.Pool may drop one
	// (under the race detector a quarter of them, on purpose), so try a
	// few times, with every buffer released so far.
	reused := false
	for range 20 {
		again := new(pooledAdd)
		if err := c.Unmarshal(enc, again); err != nil {
			t.Fatal(err)
		}
		reused = reused || released[&again.Payload[0]]
		released[&again.Payload[0]] = true
		again.Release()
	}
	if !reused {
		t.Fatal("a released buffer was never handed out again")
	}
}
