package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/strata-log/strata/proto/metadpb"
)

// Format is an output format.
type Format string

// Output formats.
const (
	FormatText Format = "text"
	FormatJSON Format = "json"
)

// ParseFormat checks an --output value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case FormatText, FormatJSON:
		return f, nil
	}
	return "", fmt.Errorf("--output %q: want text or json", s)
}

// Printer writes command results to W in Format.
type Printer struct {
	W      io.Writer
	Format Format
}

// JSON writes v as one line of JSON.
func (p *Printer) JSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = p.W.Write(b)
	return err
}

// KeyValue is the JSON form of a key (see the package doc).
type KeyValue struct {
	Key            string  `json:"key"`
	Value          *string `json:"value,omitempty"`
	ValueBase64    string  `json:"value_base64,omitempty"`
	CreateRevision int64   `json:"create_revision"`
	ModRevision    int64   `json:"mod_revision"`
	Version        int64   `json:"version"`
	Lease          int64   `json:"lease,omitempty"`
}

// NewKeyValue converts kv; withValue false leaves the value out.
func NewKeyValue(kv *metadpb.KeyValue, withValue bool) KeyValue {
	out := KeyValue{Key: kv.GetKey(), CreateRevision: kv.GetCreateRevision(),
		ModRevision: kv.GetModRevision(), Version: kv.GetVersion(), Lease: kv.GetLease()}
	if withValue {
		if v := kv.GetValue(); utf8.Valid(v) {
			s := string(v)
			out.Value = &s
		} else {
			out.ValueBase64 = base64.StdEncoding.EncodeToString(v)
		}
	}
	return out
}

// DisplayValue renders a value on one line of text: as is when it is
// printable UTF-8 on a single line, Go-quoted otherwise.
func DisplayValue(v []byte) string {
	s := string(v)
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' {
			return strconv.Quote(s)
		}
	}
	if s == "" || strings.TrimSpace(s) != s {
		return strconv.Quote(s) // make empty and padded values visible
	}
	return s
}

// Value prints a key's value for get: the raw bytes and a newline in text
// (so binary values survive redirection), the key object in JSON.
func (p *Printer) Value(kv *metadpb.KeyValue) error {
	if p.Format == FormatJSON {
		return p.JSON(NewKeyValue(kv, true))
	}
	_, err := p.W.Write(append(append([]byte(nil), kv.GetValue()...), '\n'))
	return err
}

// List prints a listing: "key value" per line (only the key with
// keysOnly) in text; {"revision": N, "kvs": [...]} in JSON.
func (p *Printer) List(kvs []*metadpb.KeyValue, revision int64, keysOnly bool) error {
	if p.Format == FormatJSON {
		out := struct {
			Revision int64      `json:"revision"`
			KVs      []KeyValue `json:"kvs"`
		}{Revision: revision, KVs: []KeyValue{}}
		for _, kv := range kvs {
			out.KVs = append(out.KVs, NewKeyValue(kv, !keysOnly))
		}
		return p.JSON(out)
	}
	var b strings.Builder
	for _, kv := range kvs {
		b.WriteString(kv.GetKey())
		if !keysOnly {
			b.WriteByte(' ')
			b.WriteString(DisplayValue(kv.GetValue()))
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(p.W, b.String())
	return err
}

// Put prints the result of a put: "OK revision=R version=V" in text, the
// key object (without its value) in JSON.
func (p *Printer) Put(kv *metadpb.KeyValue) error {
	if p.Format == FormatJSON {
		return p.JSON(NewKeyValue(kv, false))
	}
	_, err := fmt.Fprintf(p.W, "OK revision=%d version=%d\n", kv.GetModRevision(), kv.GetVersion())
	return err
}

// Deleted prints the result of a delete: "OK deleted=N" or {"deleted": N}.
func (p *Printer) Deleted(n int64) error {
	if p.Format == FormatJSON {
		return p.JSON(map[string]int64{"deleted": n})
	}
	_, err := fmt.Fprintf(p.W, "OK deleted=%d\n", n)
	return err
}

// Event is the JSON form of a watch event: the type and the key's fields
// (mod_revision is the revision of the change).
type Event struct {
	Type string `json:"type"`
	KeyValue
}

// Event prints one watch event: "PUT key value rev=N" or
// "DELETE key rev=N" in text; one JSON object per line.
func (p *Printer) Event(ev *metadpb.Event) error {
	kv := ev.GetKv()
	isPut := ev.GetType() == metadpb.Event_PUT
	if p.Format == FormatJSON {
		return p.JSON(Event{Type: ev.GetType().String(), KeyValue: NewKeyValue(kv, isPut)})
	}
	var err error
	if isPut {
		_, err = fmt.Fprintf(p.W, "PUT %s %s rev=%d\n", kv.GetKey(), DisplayValue(kv.GetValue()), kv.GetModRevision())
	} else {
		_, err = fmt.Fprintf(p.W, "DELETE %s rev=%d\n", kv.GetKey(), kv.GetModRevision())
	}
	return err
}

// Member is the JSON form of a metad member.
type Member struct {
	ID            string `json:"id"`
	RaftAddress   string `json:"raft_address"`
	ClientAddress string `json:"client_address"`
	AdminAddress  string `json:"admin_address"`
	Voter         bool   `json:"voter"`
}

// Members prints a membership: a table in text, {"members": [...]} in JSON.
func (p *Printer) Members(members []*metadpb.Member) error {
	if p.Format == FormatJSON {
		out := struct {
			Members []Member `json:"members"`
		}{Members: []Member{}}
		for _, m := range members {
			out.Members = append(out.Members, Member{ID: m.GetId(), RaftAddress: m.GetRaftAddress(),
				ClientAddress: m.GetClientAddress(), AdminAddress: m.GetAdminAddress(), Voter: m.GetVoter()})
		}
		return p.JSON(out)
	}
	tw := tabwriter.NewWriter(p.W, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT ADDRESS\tCLIENT ADDRESS\tVOTER")
	for _, m := range members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\n", m.GetId(), Dash(m.GetRaftAddress()), Dash(m.GetClientAddress()), m.GetVoter())
	}
	return tw.Flush()
}

// Dash prints s, or "-" for an empty s (a table cell with nothing in it).
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Bytes formats a byte count for people: 0 B, 512 B, 1.5 KiB, 20.0 GiB.
func Bytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
