package ledgers

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// SimpleTestJSON is `strata ledger simpletest --output json`.
type SimpleTestJSON struct {
	LedgerID      uint64   `json:"ledger_id"`
	Ensemble      []string `json:"ensemble"`
	E             int      `json:"ensemble_size"`
	Qw            int      `json:"write_quorum"`
	Qa            int      `json:"ack_quorum"`
	Entries       int      `json:"entries"`
	EntrySize     int      `json:"entry_size"`
	Bytes         int64    `json:"bytes"`
	WriteSeconds  float64  `json:"write_seconds"`
	WriteMBps     float64  `json:"write_mb_per_second"`
	WriteEntriesS float64  `json:"write_entries_per_second"`
	ReadSeconds   float64  `json:"read_seconds"`
	ReadMBps      float64  `json:"read_mb_per_second"`
	ReadEntriesS  float64  `json:"read_entries_per_second"`
	LatencyP50    float64  `json:"add_latency_p50_ms"`
	LatencyP99    float64  `json:"add_latency_p99_ms"`
	LatencyP999   float64  `json:"add_latency_p999_ms"`
	LatencyMax    float64  `json:"add_latency_max_ms"`
	Verified      int      `json:"verified"`
	Closed        bool     `json:"closed"`
	Deleted       bool     `json:"deleted"`
	DeleteError   string   `json:"delete_error,omitempty"`
	OK            bool     `json:"ok"`
	Error         string   `json:"error,omitempty"`
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// PrintSimpleTest prints a simpletest's result (testErr: why it failed,
// if it did): JSON, or throughput, latency and what became of the ledger.
func PrintSimpleTest(p *cli.Printer, r *ledger.SimpleTestResult, testErr error) error {
	if p.Format == cli.FormatJSON {
		out := SimpleTestJSON{
			LedgerID: r.LedgerID, Ensemble: r.Ensemble, E: r.E, Qw: r.Qw, Qa: r.Qa,
			Entries: r.Entries, EntrySize: r.EntrySize, Bytes: r.Bytes,
			WriteSeconds: r.WriteTime.Seconds(), WriteMBps: r.WriteMBps(), WriteEntriesS: r.WriteEntriesPerSecond(),
			ReadSeconds: r.ReadTime.Seconds(), ReadMBps: r.ReadMBps(), ReadEntriesS: r.ReadEntriesPerSecond(),
			LatencyP50: ms(r.AddLatency.P50), LatencyP99: ms(r.AddLatency.P99), LatencyP999: ms(r.AddLatency.P999),
			LatencyMax: ms(r.AddLatency.Max), Verified: r.Verified, Closed: r.Closed, Deleted: r.Deleted,
			OK: testErr == nil,
		}
		if testErr != nil {
			out.Error = testErr.Error()
		}
		if r.DeleteError != nil {
			out.DeleteError = r.DeleteError.Error()
		}
		return p.JSON(out)
	}
	w := p.W
	fmt.Fprintf(w, "ledger %d on %s (E=%d Qw=%d Qa=%d)\n", r.LedgerID, strings.Join(r.Ensemble, ","), r.E, r.Qw, r.Qa)
	fmt.Fprintf(w, "write: %d entries of %d bytes (%s) in %v: %.2f MB/s, %.0f entries/s\n",
		r.Entries, r.EntrySize, cli.Bytes(uint64(r.Bytes)), r.WriteTime.Round(time.Millisecond), r.WriteMBps(), r.WriteEntriesPerSecond())
	l := r.AddLatency
	fmt.Fprintf(w, "add latency: p50 %v  p99 %v  p99.9 %v  max %v  (%d acknowledged)\n",
		roundLatency(l.P50), roundLatency(l.P99), roundLatency(l.P999), roundLatency(l.Max), l.Count)
	if r.Closed {
		fmt.Fprintf(w, "read:  %d of %d entries verified in %v: %.2f MB/s, %.0f entries/s\n",
			r.Verified, r.Entries, r.ReadTime.Round(time.Millisecond), r.ReadMBps(), r.ReadEntriesPerSecond())
	}
	switch {
	case r.Deleted:
		fmt.Fprintf(w, "ledger %d deleted\n", r.LedgerID)
	case r.DeleteError != nil:
		fmt.Fprintf(w, "ledger %d NOT fully deleted: %v\n", r.LedgerID, r.DeleteError)
	default:
		fmt.Fprintf(w, "ledger %d kept\n", r.LedgerID)
	}
	if testErr == nil {
		fmt.Fprintln(w, "OK")
	}
	return nil
}

// roundLatency rounds d to µs below 1 ms, to 10 µs above.
func roundLatency(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(10 * time.Microsecond)
}

// Row is the JSON form of a ledger in list and describe.
type Row struct {
	ID          uint64            `json:"id"`
	State       string            `json:"state"`
	E           int32             `json:"ensemble_size"`
	Qw          int32             `json:"write_quorum"`
	Qa          int32             `json:"ack_quorum"`
	LastEntryID *int64            `json:"last_entry_id,omitempty"` // closed ledgers only
	Entries     *int64            `json:"entries,omitempty"`       // closed ledgers only
	Length      *int64            `json:"length,omitempty"`        // closed ledgers only
	LAC         *int64            `json:"last_add_confirmed,omitempty"`
	Ensemble    []string          `json:"ensemble"` // the last fragment's
	Fragments   []Fragment        `json:"fragments,omitempty"`
	CreatedAt   string            `json:"created_at,omitempty"`
	ClosedAt    string            `json:"closed_at,omitempty"`
	Properties  map[string]string `json:"properties,omitempty"`
}

// Fragment is one fragment of a described ledger.
type Fragment struct {
	FirstEntryID int64    `json:"first_entry_id"`
	LastEntryID  *int64   `json:"last_entry_id,omitempty"` // unknown for an open ledger's last
	Bookies      []string `json:"bookies"`
}

// timeString is ms as RFC 3339 UTC, or "" for 0.
func timeString(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

// NewRow is md's row; withFragments lists its fragments (describe).
func NewRow(md *ledgerpb.LedgerMetadata, withFragments bool) Row {
	frags := md.GetFragments()
	r := Row{ID: md.GetId(), State: md.GetState().String(), E: md.GetEnsembleSize(), Qw: md.GetWriteQuorum(),
		Qa: md.GetAckQuorum(), CreatedAt: timeString(md.GetCreatedAtMs()), ClosedAt: timeString(md.GetClosedAtMs()),
		Properties: md.GetProperties(), Ensemble: []string{}}
	if len(frags) > 0 {
		r.Ensemble = frags[len(frags)-1].GetBookies()
	}
	closed := md.GetState() == ledgerpb.LedgerState_CLOSED
	if closed {
		last, length := md.GetLastEntryId(), md.GetLength()
		entries := last + 1
		r.LastEntryID, r.Entries, r.Length = &last, &entries, &length
	}
	if withFragments {
		for i, f := range frags {
			fr := Fragment{FirstEntryID: f.GetFirstEntryId(), Bookies: f.GetBookies()}
			switch {
			case i+1 < len(frags):
				last := frags[i+1].GetFirstEntryId() - 1
				fr.LastEntryID = &last
			case closed:
				last := md.GetLastEntryId()
				fr.LastEntryID = &last
			}
			r.Fragments = append(r.Fragments, fr)
		}
	}
	return r
}

// dashInt is *p, or "-" for nil.
func dashInt(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(*p, 10)
}

// PrintDescription prints a described ledger: JSON, or a table of its
// metadata and its fragments; lacErr says why an open ledger's last add
// confirmed is unknown.
func PrintDescription(p *cli.Printer, r Row, lacErr error) error {
	if p.Format == cli.FormatJSON {
		return p.JSON(r)
	}
	return printDescription(p.W, r, lacErr)
}

func printDescription(w io.Writer, r Row, lacErr error) error {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintf(tw, "ledger\t%d\n", r.ID)
	fmt.Fprintf(tw, "state\t%s\n", r.State)
	fmt.Fprintf(tw, "quorums\tE=%d Qw=%d Qa=%d\n", r.E, r.Qw, r.Qa)
	switch {
	case r.LastEntryID != nil:
		fmt.Fprintf(tw, "last entry\t%d\n", *r.LastEntryID)
		fmt.Fprintf(tw, "length\t%s (%d bytes)\n", cli.Bytes(uint64(*r.Length)), *r.Length)
	case r.LAC != nil:
		fmt.Fprintf(tw, "last add confirmed\t%d (from the bookies; the ledger is open)\n", *r.LAC)
	default:
		fmt.Fprintf(tw, "last add confirmed\tunknown: %v\n", lacErr)
	}
	if r.CreatedAt != "" {
		fmt.Fprintf(tw, "created\t%s\n", r.CreatedAt)
	}
	if r.ClosedAt != "" {
		fmt.Fprintf(tw, "closed\t%s\n", r.ClosedAt)
	}
	keys := make([]string, 0, len(r.Properties))
	for k := range r.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		label := ""
		if i == 0 {
			label = "properties"
		}
		fmt.Fprintf(tw, "%s\t%s=%s\n", label, k, r.Properties[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "fragments:")
	tw = tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "  FIRST ENTRY\tLAST ENTRY\tBOOKIES")
	for _, f := range r.Fragments {
		fmt.Fprintf(tw, "  %d\t%s\t%s\n", f.FirstEntryID, dashInt(f.LastEntryID), strings.Join(f.Bookies, ","))
	}
	return tw.Flush()
}

// EntryCheckJSON is one checked entry of `strata ledger read --output json`.
type EntryCheckJSON struct {
	ID     int64  `json:"id"`
	Size   int    `json:"size"`
	CRC32C string `json:"crc32c,omitempty"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// PrintEntryCheck prints one checked entry: a JSON object, or a
// tab-separated line (id, size, CRC-32C, status).
func PrintEntryCheck(p *cli.Printer, c ledger.EntryCheck) error {
	if p.Format == cli.FormatJSON {
		out := EntryCheckJSON{ID: c.ID, Size: c.Size, Status: string(c.Status)}
		if c.Status == ledger.EntryOK {
			out.CRC32C = fmt.Sprintf("%08x", c.CRC32C)
		} else if c.Err != nil {
			out.Error = c.Err.Error()
		}
		return p.JSON(out)
	}
	if c.Status != ledger.EntryOK {
		_, err := fmt.Fprintf(p.W, "%d\t-\t-\t%s\t%v\n", c.ID, c.Status, c.Err)
		return err
	}
	_, err := fmt.Fprintf(p.W, "%d\t%d\t%08x\t%s\n", c.ID, c.Size, c.CRC32C, c.Status)
	return err
}

// PrintList prints `strata ledger list`: a table, or JSON {"ledgers": [...]}.
func PrintList(p *cli.Printer, mds []*ledgerpb.LedgerMetadata) error {
	rows := make([]Row, 0, len(mds))
	for _, md := range mds {
		rows = append(rows, NewRow(md, false))
	}
	if p.Format == cli.FormatJSON {
		return p.JSON(struct {
			Ledgers []Row `json:"ledgers"`
		}{rows})
	}
	tw := tabwriter.NewWriter(p.W, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tENTRIES\tSIZE\tENSEMBLE")
	for _, r := range rows {
		size := "-"
		if r.Length != nil {
			size = cli.Bytes(uint64(*r.Length))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.ID, r.State, dashInt(r.Entries), size, strings.Join(r.Ensemble, ","))
	}
	return tw.Flush()
}

// CheckRange checks entries first..last of ledger id with r, printing
// each through p; it fails when an entry is not OK, counting the corrupt
// and the unreadable ones.
func CheckRange(ctx context.Context, r *ledger.Reader, id uint64, first, last int64, p *cli.Printer) error {
	bad := map[ledger.EntryStatus]int{}
	if first <= last {
		err := ledger.CheckEntries(ctx, r, first, last, func(c ledger.EntryCheck) error {
			if c.Status != ledger.EntryOK {
				bad[c.Status]++
			}
			return PrintEntryCheck(p, c)
		})
		if err != nil {
			return err
		}
	}
	if n := bad[ledger.EntryCorrupt] + bad[ledger.EntryUnreadable]; n > 0 {
		return fmt.Errorf("ledger %d: %d entries not OK (%d corrupt, %d unreadable)", id, n,
			bad[ledger.EntryCorrupt], bad[ledger.EntryUnreadable])
	}
	return nil
}
