package ledger

import (
	"fmt"

	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// recoveryMachine decides a ledger's recovery from bookies' answers. It
// does no I/O: it returns the requests to send (recoveryOp) and is fed the
// answers, in any order, so a test can drive it through every
// interleaving (etcd-raft style). Recover drives it over the network.
//
// Invariants (DESIGN.md §3; reference/protocols.md §1):
//
//   - R1 Fencing completes when every write set of the last ensemble has
//     (Qw-Qa)+1 fenced members (BookKeeper's per-write-set coverage; for
//     E=Qw that is BP-46's (E-Qa)+1). The old writer can then reach at most
//     Qa-1 members of any write set, so it acknowledges nothing new.
//   - R2 Every read is a FENCING read (BookKeeper #2614): a bookie whose
//     fence request was lost is fenced by the first read that reaches it,
//     before it answers. Otherwise it could accept the old writer's add
//     after telling recovery "no such entry", and the writer would get an
//     acknowledgement for an entry recovery truncated.
//   - R3 One positive answer makes an entry present. An entry is absent
//     only after (Qw-Qa)+1 members of its write set EXPLICITLY answered
//     READ_NO_ENTRY (BookKeeper PR #1077). Errors and timeouts are never
//     "absent": the read is retried until the entry is decided (or the
//     caller's context ends). Since (Qw-Qa+1)+Qa > Qw, an acknowledged
//     entry cannot be absent, unless a bookie lost data it acknowledged,
//     which bookie cookies exist to prevent (BookKeeper #2908, BP-46).
//   - R4 Reading starts at max(max fenced LAC + 1, first entry of the last
//     fragment): LACs are acknowledged entries, and the writer starts a
//     fragment at LAC+1, so everything below the last fragment is
//     acknowledged and stays as it is. A fenced bookie's LAC counts only up
//     to the last entry it reports holding: starting lower is always safe
//     (entries found are rewritten with the bytes they have), while a LAC
//     above every entry a bookie holds can only be a buggy or hostile
//     WriteLAC (bookies refuse them now, H1 in ledger/storage/doc.go, but
//     one stored before that rule would make recovery look for entries
//     nobody has). A LAC within the entries its bookie holds can still be
//     false (V2 in doc.go): R10 catches those.
//   - R5 Every entry found is rewritten to its whole write set with
//     recovery adds (allowed on fenced bookies) and counts once Qa members
//     answered ADD_OK, like a normal acknowledgement. Recovery does not
//     change the ensemble: with fewer than Qa live members in a write set
//     it waits (and retries) until ctx ends.
//   - R6 The ledger ends just before the first absent entry; entries read
//     ahead beyond it are ignored.
//   - R7 A member answering ADD_ENTRY_CONFLICT holds other bytes for an
//     entry another member served. Entries are immutable and have one
//     writer, so one of the copies was tampered with (or a bug wrote it);
//     recovery cannot tell which, and closing the ledger would make the
//     disagreement permanent, so it stops with ErrEntryConflict naming the
//     ledger, the entry and the bookie.
//   - R8 Reads run ahead of the decided entries (recoveryWindow) only up
//     to one past the highest entry a fenced bookie reports holding
//     (lastHeld + 1); beyond it entries are read one at a time. The bound
//     changes only how many reads are in flight, never how an entry is
//     decided (R3): an entry found beyond it, on a member that was not
//     fenced yet, is taken as usual. It keeps the recovery of a ledger of
//     a few entries (a partition written once) at a few reads per member
//     instead of a window's worth of READ_NO_ENTRY answers.
//   - R9 A fence answer marked complete (the bookie is not in limbo: it
//     holds every entry it acknowledged) counts as an explicit
//     READ_NO_ENTRY from that member for every entry above its
//     last_entry_id: the answer includes every add journaled before the
//     fence, and after it the member takes no normal add, exactly what a
//     fencing read's negative says (R2, R3). Such an entry is read only
//     from the members that did not already say so, and one that has
//     (Qw-Qa)+1 of them is decided absent without a read: the entry past
//     the end of a ledger is usually decided by the fences alone.
//   - R10 No LAC is trusted that no bookie can serve. Once fencing is
//     done the machine waits (proceed): the driver first reads every
//     entry below readStart, as it must to size the ledger
//     (prefixLength). An entry of the last fragment that no member
//     serves is probed with fencing reads and decided as R3 decides any
//     entry; decided absent, it proves every fenced LAC at or above it
//     false (V3 in doc.go: an acknowledged entry is never absent, and the
//     writer acknowledges in order). distrust drops those LACs: reading
//     starts after the highest LAC left, at least at the last fragment's
//     first entry; the entries from there to the absent one, which the
//     driver read and visited, are known present: rewritten (R5) but
//     neither counted again nor ever decided absent (a negative is asked
//     again); and the ledger ends at the first absent entry from the
//     probed one on (R6). Recovery adds then carry the highest LAC left.
//     An entry below the last fragment is acknowledged by the metadata
//     itself (the writer started the next fragment after it, W-rules),
//     so one absent there is lost data, not a false LAC: recovery reports
//     it and waits (prefixLength).
type recoveryMachine struct {
	ledgerID    uint64
	dig         digester // checks the copies read (D1)
	ensemble    []string
	firstEntry  int64 // the last fragment's first entry
	writeQuorum int
	ackQuorum   int
	absentQ     int // (Qw-Qa)+1

	fenced   map[string]bool
	lacs     map[string]int64 // each fenced member's LAC, bounded as R4 says
	maxLAC   int64
	lastHeld int64 // the highest entry a fenced bookie reports holding (R8)
	// heldUpTo: the last entry of each member whose fence answer was
	// complete (R9).
	heldUpTo    map[string]int64
	fencingDone bool

	start int64 // first entry read
	// counted: the first entry whose payload the machine counts and
	// keeps; the driver sized and visited those below it. It is start,
	// unless distrust lowered start (R10): entries start..counted-1 are
	// known present, and only rewritten.
	counted int64
	reading bool  // proceed was called: reading forward
	next    int64 // next entry to start reading
	present int64 // entries start..present are present (present >= start-1)
	absent  int64 // first absent entry, -1 until found
	reads   map[int64]*entryRead
	writes  map[int64]*entryWrite // rewrites that have not reached Qa
	length  int64                 // payload bytes of entries start..present
	// keepFound keeps in found the payloads (digest removed) of entries
	// start..present, for RecoverVisit.
	keepFound bool
	found     [][]byte
	err       error
	// digestMismatches counts copies read with a wrong digest.
	digestMismatches int
}

// recoveryWindow bounds the entries read ahead and the rewrites in flight.
const recoveryWindow = 16

type recoveryOpKind int

const (
	opFence recoveryOpKind = iota + 1
	opRead
	opRecoveryAdd
)

func (k recoveryOpKind) String() string {
	switch k {
	case opFence:
		return "fence"
	case opRead:
		return "read"
	case opRecoveryAdd:
		return "recovery-add"
	}
	return "?"
}

// recoveryOp is one request the machine wants sent. The answer goes back
// through onFence, onRead or onAdd.
type recoveryOp struct {
	kind    recoveryOpKind
	bookie  string
	entry   int64  // opRead, opRecoveryAdd
	fence   bool   // opRead: a fencing read (always, R2)
	payload []byte // opRecoveryAdd
	lac     int64  // opRecoveryAdd: piggybacked LAC
	// attempt counts earlier failed attempts of the same request: a driver
	// waits (backs off) before sending an op with attempt > 0.
	attempt int
}

type entryRead struct {
	ws        []string
	negatives map[string]bool
	attempts  map[string]int
	known     bool // known present (R10): a negative is asked again
	decided   bool
	found     bool
	payload   []byte // as stored, digest included
	opened    []byte // payload without its digest
}

type entryWrite struct {
	ws       []string
	payload  []byte
	oks      map[string]bool
	attempts map[string]int
}

// newRecoveryMachine prepares the recovery of md, which must be
// IN_RECOVERY and valid.
func newRecoveryMachine(md *ledgerpb.LedgerMetadata) (*recoveryMachine, error) {
	if err := validateMetadata(md); err != nil {
		return nil, err
	}
	last := md.Fragments[len(md.Fragments)-1]
	return &recoveryMachine{
		ledgerID:    md.Id,
		dig:         newDigester(md),
		ensemble:    last.Bookies,
		firstEntry:  last.FirstEntryId,
		writeQuorum: int(md.WriteQuorum),
		ackQuorum:   int(md.AckQuorum),
		absentQ:     absentQuorum(md),
		fenced:      make(map[string]bool),
		lacs:        make(map[string]int64),
		heldUpTo:    make(map[string]int64),
		maxLAC:      -1,
		lastHeld:    -1,
		absent:      -1,
		reads:       make(map[int64]*entryRead),
		writes:      make(map[int64]*entryWrite),
	}, nil
}

// begin returns the fence requests to the last ensemble.
func (m *recoveryMachine) begin() []recoveryOp {
	ops := make([]recoveryOp, 0, len(m.ensemble))
	for _, b := range m.ensemble {
		ops = append(ops, recoveryOp{kind: opFence, bookie: b})
	}
	return ops
}

// done reports whether the recovery is decided: failed, or the first absent
// entry is known and every entry before it is rewritten.
func (m *recoveryMachine) done() bool {
	return m.err != nil || (m.absent >= 0 && len(m.writes) == 0)
}

// result is the recovered last entry, the first entry whose payload
// recovery counted (the driver sized the ones below) and the payload bytes
// of entries start..last. Valid once done with a nil error.
func (m *recoveryMachine) result() (last, start, length int64, err error) {
	return m.absent - 1, m.counted, m.length, m.err
}

// onFence takes a Fence answer (R1). Once every write set is fenced the
// machine waits for proceed: the driver first checks the entries below
// readStart (R10).
func (m *recoveryMachine) onFence(bookie string, resp *bookiepb.FenceResponse, err error, attempt int) []recoveryOp {
	if m.fencingDone {
		return nil
	}
	if err != nil || resp == nil {
		return []recoveryOp{{kind: opFence, bookie: bookie, attempt: attempt + 1}}
	}
	m.fenced[bookie] = true
	m.lacs[bookie] = min(resp.Lac, resp.LastEntryId) // R4
	m.maxLAC = max(m.maxLAC, m.lacs[bookie])
	m.lastHeld = max(m.lastHeld, resp.LastEntryId) // R8
	if resp.Complete {
		m.heldUpTo[bookie] = resp.LastEntryId // R9
	}
	if !m.fencedEveryWriteSet() {
		return nil
	}
	m.fencingDone = true
	m.start = max(m.maxLAC+1, m.firstEntry) // R4
	m.counted = m.start
	return nil
}

// readStart is the first entry recovery reads forward from, once fencing
// is done: every entry below it is taken as acknowledged, and the driver
// reads them (prefixLength) before proceed.
func (m *recoveryMachine) readStart() int64 { return m.start }

// proceed starts reading forward from readStart (R2, R3, R8), after the
// driver checked the entries below it (R10). Called once, after fencing.
func (m *recoveryMachine) proceed() []recoveryOp {
	m.reading = true
	clear(m.reads) // the probes' (R10); their late answers are ignored
	m.next, m.present = m.start, m.start-1
	return m.readAhead()
}

// probe starts deciding entry e, below readStart in the last fragment,
// which the driver could not read (R10): fencing reads to the members of
// its write set that did not already say they lack it (R9). probed tells
// when it is decided.
func (m *recoveryMachine) probe(e int64) []recoveryOp {
	r := m.newRead(e)
	m.reads[e] = r
	if len(r.negatives) >= m.absentQ {
		r.decided = true
		return nil
	}
	return r.readOps(e)
}

// probed reports whether probe(e) is decided, and whether e was found,
// with the copy found (as the bookie stores it, digest checked).
func (m *recoveryMachine) probed(e int64) (decided, found bool, stored []byte) {
	r := m.reads[e]
	if r == nil {
		return false, false, nil
	}
	return r.decided, r.found, r.payload
}

// distrust takes entry absent, below readStart and decided absent by
// probe, as proof that every LAC at or above it is false (R10): those are
// dropped, reading starts after the highest LAC left (at least at the last
// fragment's first entry), and the entries from there to absent, which
// the driver read and visited, are rewritten but neither counted nor
// decided absent again. It returns the members whose LACs were dropped,
// with their LACs.
func (m *recoveryMachine) distrust(absent int64) map[string]int64 {
	dropped := make(map[string]int64)
	m.maxLAC = -1
	for b, lac := range m.lacs {
		if lac >= absent {
			dropped[b] = lac
			continue
		}
		m.maxLAC = max(m.maxLAC, lac)
	}
	m.start = max(m.maxLAC+1, m.firstEntry)
	m.maxLAC = m.start - 1 // what recovery adds carry
	m.counted = absent
	return dropped
}

func (m *recoveryMachine) fencedEveryWriteSet() bool {
	for i := range m.ensemble {
		n := 0
		for _, b := range writeSet(m.ensemble, int64(i), m.writeQuorum) {
			if m.fenced[b] {
				n++
			}
		}
		if n < m.absentQ {
			return false
		}
	}
	return true
}

// readAhead starts fencing reads (R2) of the next entries, within the
// window and, past the entries the fenced bookies hold, one at a time (R8).
func (m *recoveryMachine) readAhead() []recoveryOp {
	var ops []recoveryOp
	settled := false // an entry was decided without a read (R9)
	for m.absent < 0 && m.next <= m.present+recoveryWindow && len(m.writes) < recoveryWindow &&
		(m.next <= m.lastHeld+1 || m.next == m.present+1) {
		e := m.next
		m.next++
		r := m.newRead(e)
		m.reads[e] = r
		if len(r.negatives) >= m.absentQ {
			r.decided, settled = true, true
			continue
		}
		ops = append(ops, r.readOps(e)...)
	}
	if settled {
		return append(ops, m.advance()...)
	}
	return ops
}

// newRead prepares the decision of entry e, with the negatives complete
// fences already gave (R9); an entry below counted is known present
// (R10) and takes none.
func (m *recoveryMachine) newRead(e int64) *entryRead {
	r := &entryRead{
		ws:        writeSet(m.ensemble, e, m.writeQuorum),
		negatives: make(map[string]bool),
		attempts:  make(map[string]int),
		known:     m.reading && e < m.counted,
	}
	for _, b := range r.ws {
		if last, ok := m.heldUpTo[b]; ok && last < e && !r.known {
			r.negatives[b] = true
		}
	}
	return r
}

// readOps are the fencing reads (R2) of entry e to the members of its
// write set that did not say they lack it.
func (r *entryRead) readOps(e int64) []recoveryOp {
	var ops []recoveryOp
	for _, b := range r.ws {
		if !r.negatives[b] {
			ops = append(ops, recoveryOp{kind: opRead, bookie: b, entry: e, fence: true})
		}
	}
	return ops
}

// onRead takes a fencing read's answer (R3).
func (m *recoveryMachine) onRead(bookie string, entryID int64, resp *bookiepb.ReadEntryResponse, err error) []recoveryOp {
	r := m.reads[entryID]
	if r == nil || r.decided || m.err != nil {
		return nil
	}
	var opened []byte
	switch {
	case err == nil && resp != nil && resp.Status == bookiepb.ReadStatus_READ_OK && resp.EntryId == uint64(entryID) &&
		m.validCopy(entryID, resp.Payload, &opened):
		r.decided, r.found, r.payload, r.opened = true, true, resp.Payload, opened // rewritten as stored
	case err == nil && resp != nil && resp.Status == bookiepb.ReadStatus_READ_NO_ENTRY && !r.known:
		r.negatives[bookie] = true
		if len(r.negatives) < m.absentQ {
			return nil
		}
		r.decided = true
	default: // unknown (a copy with a wrong digest too; a known entry's negative): ask again
		r.attempts[bookie]++
		return []recoveryOp{{kind: opRead, bookie: bookie, entry: entryID, fence: true, attempt: r.attempts[bookie]}}
	}
	if !m.reading {
		return nil // a probe (R10): the driver asks probed
	}
	return m.advance()
}

// advance settles decided entries in order: present ones are rewritten, the
// first absent one ends the ledger (R6).
func (m *recoveryMachine) advance() []recoveryOp {
	var ops []recoveryOp
	for m.absent < 0 {
		e := m.present + 1
		r := m.reads[e]
		if r == nil || !r.decided {
			break
		}
		delete(m.reads, e)
		if !r.found {
			m.absent = e
			clear(m.reads)
			break
		}
		m.present = e
		if e >= m.counted { // R10: the driver counted and visited those below
			m.length += m.dig.payloadLen(r.payload)
			if m.keepFound {
				m.found = append(m.found, r.opened)
			}
		}
		w := &entryWrite{ws: r.ws, payload: r.payload, oks: make(map[string]bool), attempts: make(map[string]int)}
		m.writes[e] = w
		for _, b := range w.ws {
			ops = append(ops, m.addOp(b, e, w))
		}
	}
	return append(ops, m.readAhead()...)
}

func (m *recoveryMachine) addOp(bookie string, entryID int64, w *entryWrite) recoveryOp {
	return recoveryOp{kind: opRecoveryAdd, bookie: bookie, entry: entryID, payload: w.payload,
		lac: m.maxLAC, attempt: w.attempts[bookie]}
}

// onAdd takes a recovery add's answer (R5).
func (m *recoveryMachine) onAdd(bookie string, entryID int64, resp *bookiepb.AddResponse, err error) []recoveryOp {
	w := m.writes[entryID]
	if w == nil || m.err != nil {
		return nil
	}
	status := bookiepb.AddStatus_ADD_FAILED
	if err == nil && resp != nil {
		status = resp.Status
	}
	switch status {
	case bookiepb.AddStatus_ADD_OK:
		w.oks[bookie] = true
		if len(w.oks) >= m.ackQuorum {
			delete(m.writes, entryID)
			return m.readAhead()
		}
		return nil
	case bookiepb.AddStatus_ADD_INVALID:
		m.err = fmt.Errorf("%w: ledger %d: bookie %s rejected the recovery add of entry %d: %s",
			ErrInvalid, m.ledgerID, bookie, entryID, resp.GetMessage())
		return nil
	case bookiepb.AddStatus_ADD_ENTRY_CONFLICT: // R7
		m.err = fmt.Errorf("%w: ledger %d entry %d: bookie %s holds other bytes than recovery read: %s",
			ErrEntryConflict, m.ledgerID, entryID, bookie, resp.GetMessage())
		return nil
	}
	w.attempts[bookie]++
	return []recoveryOp{m.addOp(bookie, entryID, w)}
}

// validCopy reports whether stored, entry e as a bookie served it, has a
// matching digest (D1), and sets *opened to its payload without the
// digest. A copy that does not is neither the entry nor
// proof of its absence: it may be a damaged copy of an acknowledged entry
// (counting it absent could truncate that entry) or one written by someone
// else (taking it would extend the ledger with it), so it counts as no
// answer and the bookie is asked again while the others decide.
func (m *recoveryMachine) validCopy(e int64, stored []byte, opened *[]byte) bool {
	payload, err := m.dig.open(e, stored)
	*opened = payload
	if err != nil {
		m.digestMismatches++
	}
	return err == nil
}
