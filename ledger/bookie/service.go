package bookie

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/internal/corruption"
	"github.com/strata-log/strata/internal/rpcerror"
	"github.com/strata-log/strata/internal/wirecodec"
	"github.com/strata-log/strata/ledger/journal"
	"github.com/strata-log/strata/ledger/storage"
	"github.com/strata-log/strata/proto/bookiepb"
)

// maxOutstandingAdds bounds the adds one stream may have in flight: the
// stream stops reading requests until answers drain (back-pressure), and a
// durable add's answer never blocks the journal's writer.
const maxOutstandingAdds = 4096

// maxLACWait bounds a long-poll ReadLAC.
const maxLACWait = time.Minute

// service implements bookiepb.BookieServer over the storage engine.
type service struct {
	bookiepb.UnimplementedBookieServer
	store *storage.Storage
	info  func() *bookiepb.BookieInfo
	// draining is done once the bookie shuts down (Bookie.Drain): add
	// streams and long polls end.
	draining context.Context
}

// AddEntries answers every add with its own status; only a broken stream
// ends the call with an error.
func (s *service) AddEntries(stream grpc.BidiStreamingServer[bookiepb.AddRequest, bookiepb.AddResponse]) error {
	ctx := stream.Context()
	// Every answer holds a slot from receipt until it is sent, and the
	// channel has a slot for each, so done callbacks never block.
	slots := make(chan struct{}, maxOutstandingAdds)
	st := &streamAdds{answers: make(chan *bookiepb.AddResponse, maxOutstandingAdds)}
	sendErr := make(chan error, 1)
	senderDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		var failed error
		for a := range st.answers {
			if failed == nil {
				if err := stream.Send(a); err != nil {
					failed = err
					sendErr <- err
				}
			}
			<-slots
		}
	}()
	finish := func(err error) error {
		st.pending.Wait()
		close(st.answers)
		<-senderDone
		return err
	}
	for {
		// Each add's bytes come from a pooled buffer, given back once
		// the journal has copied them (its done callback) or refused
		// the add.
		a := getInflightAdd()
		err := stream.RecvMsg(&a.req)
		if err != nil {
			a.release()
			// io.EOF: the writer closed its side; answer what is in flight.
			if errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
				return finish(nil)
			}
			return finish(nilIfEOF(err))
		}
		select {
		case <-s.draining.Done():
			// Shutting down: answer what is in flight and end the stream,
			// so the server need not wait for it. This add was not
			// taken: the writer sees the stream end and replaces the
			// bookie.
			a.release()
			return finish(rpcerror.New(codes.Unavailable, rpcerror.ReasonUnavailable, true, "bookie: shutting down"))
		default:
		}
		select {
		case slots <- struct{}{}:
		case err := <-sendErr:
			a.release()
			return finish(err)
		case <-ctx.Done():
			a.release()
			return finish(nil)
		}
		a.stream = st
		st.pending.Add(1)
		req := &a.req
		if err := s.store.Add(ctx, req.LedgerId, req.EntryId, req.Lac, req.Entry(), req.Recovery, a.done); err != nil {
			a.done(err)
		}
	}
}

// streamAdds is what the adds of one AddEntries stream share.
type streamAdds struct {
	// answers goes to the stream's sender; it has room for every add
	// in flight (maxOutstandingAdds), so a done callback never blocks.
	answers chan *bookiepb.AddResponse
	// pending counts the adds whose done callback has not run.
	pending sync.WaitGroup
}

// inflightAdd is one add of an AddEntries stream from its receipt until
// the storage is done with it: the request and the storage's done
// callback, bound once. They come from addPool and go back to it, so
// that an add allocates no request or callback of its own. (Its answer
// is allocated: gRPC may use a message after Send returns.)
type inflightAdd struct {
	req    pooledAdd
	stream *streamAdds
	done   func(error) // stored
}

// addPool holds the inflightAdds of every stream.
var addPool sync.Pool

// getInflightAdd returns an inflightAdd from addPool, or a new one.
func getInflightAdd() *inflightAdd {
	if a, ok := addPool.Get().(*inflightAdd); ok {
		return a
	}
	a := new(inflightAdd)
	a.done = a.stored
	return a
}

// stored is the add's done callback (storage.Storage.Add): the journal
// is done with the request's bytes; the answer goes to the sender, and a
// back to addPool.
func (a *inflightAdd) stored(err error) {
	resp := &bookiepb.AddResponse{RequestId: a.req.RequestId, LedgerId: a.req.LedgerId, EntryId: a.req.EntryId,
		Status: addStatus(err)}
	if err != nil {
		resp.Message = err.Error()
	}
	st := a.stream
	a.release()
	st.answers <- resp
	st.pending.Done()
}

// release gives a back to addPool, cleared: the request's buffer goes
// back to its pool, and its bytes fields, which alias it, are reset.
func (a *inflightAdd) release() {
	a.req.Release()
	a.req.Reset()
	a.stream = nil
	addPool.Put(a)
}

// pooledAdd is an add decoded into a pooled buffer (wirecodec.Pooled):
// storage.Add keeps its payload only until its done callback.
type pooledAdd struct {
	bookiepb.AddRequest
	wirecodec.Pooled
}

func nilIfEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// addStatus maps a storage error to the add's status.
func addStatus(err error) bookiepb.AddStatus {
	switch {
	case err == nil:
		return bookiepb.AddStatus_ADD_OK
	case errors.Is(err, storage.ErrFenced):
		return bookiepb.AddStatus_ADD_FENCED
	case errors.Is(err, storage.ErrReadOnly):
		return bookiepb.AddStatus_ADD_READ_ONLY
	case errors.Is(err, storage.ErrInvalid):
		return bookiepb.AddStatus_ADD_INVALID
	case errors.Is(err, storage.ErrEntryConflict):
		return bookiepb.AddStatus_ADD_ENTRY_CONFLICT
	}
	return bookiepb.AddStatus_ADD_FAILED
}

func entryResponse(e storage.Entry, known int64) *bookiepb.ReadEntryResponse {
	return &bookiepb.ReadEntryResponse{
		Status: bookiepb.ReadStatus_READ_OK, LedgerId: e.LedgerID, EntryId: e.EntryID,
		Lac: e.LAC, Payload: e.Payload, KnownLac: known,
	}
}

func (s *service) knownLAC(ledgerID uint64) int64 {
	if st, ok := s.store.State(ledgerID); ok {
		return st.LAC
	}
	return -1
}

func (s *service) ReadEntry(ctx context.Context, req *bookiepb.ReadEntryRequest) (*bookiepb.ReadEntryResponse, error) {
	if req.Fence {
		if _, err := s.store.Fence(ctx, req.LedgerId); err != nil {
			return nil, toStatus(err)
		}
	}
	e, err := s.store.Read(req.LedgerId, req.EntryId)
	if errors.Is(err, storage.ErrNoEntry) {
		return &bookiepb.ReadEntryResponse{
			Status: bookiepb.ReadStatus_READ_NO_ENTRY, LedgerId: req.LedgerId, EntryId: req.EntryId,
			KnownLac: s.knownLAC(req.LedgerId),
		}, nil
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return entryResponse(e, s.knownLAC(req.LedgerId)), nil
}

func (s *service) ReadEntries(req *bookiepb.ReadEntriesRequest, stream grpc.ServerStreamingServer[bookiepb.ReadEntryResponse]) error {
	if req.LastEntryId < req.FirstEntryId {
		return toStatus(fmt.Errorf("%w: last entry %d before first %d", storage.ErrInvalid, req.LastEntryId, req.FirstEntryId))
	}
	maxBytes := req.MaxBytes
	if maxBytes <= 0 {
		maxBytes = 4 << 20
	}
	known := s.knownLAC(req.LedgerId)
	err := s.store.ReadRange(req.LedgerId, req.FirstEntryId, req.LastEntryId, maxBytes, func(e storage.Entry) error {
		// The entry's pooled buffer goes back once gRPC has sent it.
		return stream.SendMsg(bookiepb.HeldEntry{ReadEntryResponse: entryResponse(e, known), Held: e.Held, Pool: journal.ReadBuffers})
	})
	return toStatus(err)
}

func (s *service) ReadLAC(ctx context.Context, req *bookiepb.ReadLACRequest) (*bookiepb.ReadLACResponse, error) {
	var st storage.LedgerState
	if req.WaitMs > 0 {
		wait := min(time.Duration(req.WaitMs)*time.Millisecond, maxLACWait)
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		defer context.AfterFunc(s.draining, cancel)() // shutting down: answer with what there is
		var err error
		st, err = s.store.WaitLAC(wctx, req.LedgerId, req.PreviousLac)
		if err != nil && wctx.Err() == nil {
			return nil, toStatus(err)
		}
		if ctx.Err() != nil {
			return nil, toStatus(ctx.Err())
		}
	} else {
		// LAC and LastEntryID are -1 for a ledger held nowhere here; a
		// deleted fenced ledger still says it is fenced.
		st, _ = s.store.State(req.LedgerId)
	}
	return &bookiepb.ReadLACResponse{Lac: st.LAC, LastEntryId: st.LastEntryID, Fenced: st.Fenced}, nil
}

func (s *service) Fence(ctx context.Context, req *bookiepb.FenceRequest) (*bookiepb.FenceResponse, error) {
	st, err := s.store.Fence(ctx, req.LedgerId)
	if err != nil {
		return nil, toStatus(err)
	}
	// In limbo the bookie may have lost entries it acknowledged: its last
	// entry then proves nothing about the entries above it.
	return &bookiepb.FenceResponse{Lac: st.LAC, LastEntryId: st.LastEntryID, Complete: !s.store.Limbo()}, nil
}

func (s *service) WriteLAC(ctx context.Context, req *bookiepb.WriteLACRequest) (*bookiepb.WriteLACResponse, error) {
	if err := s.store.WriteLAC(ctx, req.LedgerId, req.Lac); err != nil {
		return nil, toStatus(err)
	}
	return &bookiepb.WriteLACResponse{}, nil
}

func (s *service) DeleteLedger(ctx context.Context, req *bookiepb.DeleteLedgerRequest) (*bookiepb.DeleteLedgerResponse, error) {
	if err := s.store.Delete(ctx, req.LedgerId); err != nil {
		return nil, toStatus(err)
	}
	return &bookiepb.DeleteLedgerResponse{}, nil
}

func (s *service) Info(context.Context, *bookiepb.InfoRequest) (*bookiepb.InfoResponse, error) {
	return &bookiepb.InfoResponse{Info: s.info()}, nil
}

// reasonEntryConflict is the ErrorInfo reason for storage.ErrEntryConflict.
// It belongs with the others in internal/rpcerror.
const reasonEntryConflict = "ENTRY_CONFLICT"

// toStatus is the one place where the bookie's errors become gRPC statuses.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if st := rpcerror.FromContext(err); st != nil {
		return st
	}
	switch {
	case errors.Is(err, storage.ErrFenced):
		return rpcerror.New(codes.FailedPrecondition, rpcerror.ReasonFenced, false, err.Error())
	case errors.Is(err, storage.ErrReadOnly):
		return rpcerror.New(codes.Unavailable, rpcerror.ReasonReadOnly, true, err.Error())
	case errors.Is(err, storage.ErrInvalid):
		return rpcerror.New(codes.InvalidArgument, rpcerror.ReasonInvalid, false, err.Error())
	case errors.Is(err, storage.ErrEntryConflict):
		// Adds answer with ADD_ENTRY_CONFLICT; no unary call returns this
		// today, but if one does the client must not retry.
		return rpcerror.New(codes.AlreadyExists, reasonEntryConflict, false, err.Error())
	case corruption.Is(err):
		return rpcerror.New(codes.DataLoss, rpcerror.ReasonCorrupt, false, err.Error())
	case errors.Is(err, storage.ErrIO):
		// This bookie's disk failed the read: another copy may be fine,
		// and this one once the disk recovers.
		return rpcerror.New(codes.Unavailable, rpcerror.ReasonDiskError, true, err.Error())
	case errors.Is(err, storage.ErrUnknown):
		return rpcerror.New(codes.Unavailable, rpcerror.ReasonLimbo, false, err.Error())
	case errors.Is(err, storage.ErrNoEntry):
		return rpcerror.New(codes.NotFound, rpcerror.ReasonNotFound, false, err.Error())
	case errors.Is(err, storage.ErrClosed), errors.Is(err, storage.ErrFailed):
		return rpcerror.New(codes.Unavailable, rpcerror.ReasonUnavailable, false, err.Error())
	}
	return rpcerror.New(codes.Internal, rpcerror.ReasonInternal, false, err.Error())
}
