package cli

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-log/strata/proto/metadpb"
)

func TestResolveEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name, flag, env string
		want            []string
		wantErr         string
	}{
		{name: "default", want: []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}},
		{name: "env", env: "a:1,b:2", want: []string{"a:1", "b:2"}},
		{name: "flag wins over env", flag: "c:3", env: "a:1", want: []string{"c:3"}},
		{name: "blank flag falls back", flag: "  ", env: "a:1", want: []string{"a:1"}},
		{name: "spaces, empties and repeats", flag: " a:1 , ,b:2,a:1,", want: []string{"a:1", "b:2"}},
		{name: "ipv6", flag: "[::1]:7001", want: []string{"[::1]:7001"}},
		{name: "no port", flag: "a", wantErr: `--metad: endpoint "a": want host:port`},
		{name: "bad env", env: ":1", wantErr: `$STRATA_METAD: endpoint ":1": want host:port`},
		{name: "only commas", flag: ",,", wantErr: "--metad: no endpoints"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveEndpoints(tc.flag, tc.env)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ResolveEndpoints = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"text": FormatText, "json": FormatJSON, " JSON ": FormatJSON} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "yaml", "table"} {
		if _, err := ParseFormat(in); err == nil {
			t.Errorf("ParseFormat(%q): no error", in)
		}
	}
}

func TestDisplayValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"hello", "hello"},
		{"hello world", "hello world"},
		{"héllo", "héllo"},
		{"", `""`},
		{" padded ", `" padded "`},
		{"two\nlines", `"two\nlines"`},
		{"tab\there", `"tab\there"`},
		{"\xff\x00", `"\xff\x00"`},
	} {
		if got := DisplayValue([]byte(tc.in)); got != tc.want {
			t.Errorf("DisplayValue(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

var (
	kvA = &metadpb.KeyValue{Key: "/a", Value: []byte("one"), CreateRevision: 3, ModRevision: 7, Version: 2}
	kvB = &metadpb.KeyValue{Key: "/b", Value: []byte{0xff, 0x01}, CreateRevision: 4, ModRevision: 4, Version: 1, Lease: 9}
	kvC = &metadpb.KeyValue{Key: "/c", Value: []byte("x y\n"), CreateRevision: 5, ModRevision: 5, Version: 1}
)

func TestPrinter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format Format
		print  func(p *Printer) error
		want   string
	}{
		{"value text", FormatText, func(p *Printer) error { return p.Value(kvA) }, "one\n"},
		{"binary value text is raw", FormatText, func(p *Printer) error { return p.Value(kvB) }, "\xff\x01\n"},
		{"value json", FormatJSON, func(p *Printer) error { return p.Value(kvA) },
			`{"key":"/a","value":"one","create_revision":3,"mod_revision":7,"version":2}` + "\n"},
		{"binary value json", FormatJSON, func(p *Printer) error { return p.Value(kvB) },
			`{"key":"/b","value_base64":"/wE=","create_revision":4,"mod_revision":4,"version":1,"lease":9}` + "\n"},
		{"empty value json", FormatJSON, func(p *Printer) error { return p.Value(&metadpb.KeyValue{Key: "/e", Version: 1}) },
			`{"key":"/e","value":"","create_revision":0,"mod_revision":0,"version":1}` + "\n"},
		{"list text", FormatText, func(p *Printer) error { return p.List([]*metadpb.KeyValue{kvA, kvB, kvC}, 12, false) },
			"/a one\n/b \"\\xff\\x01\"\n/c \"x y\\n\"\n"},
		{"list keys only", FormatText, func(p *Printer) error { return p.List([]*metadpb.KeyValue{kvA, kvB}, 12, true) },
			"/a\n/b\n"},
		{"list empty", FormatText, func(p *Printer) error { return p.List(nil, 12, false) }, ""},
		{"list json", FormatJSON, func(p *Printer) error { return p.List([]*metadpb.KeyValue{kvA}, 12, false) },
			`{"revision":12,"kvs":[{"key":"/a","value":"one","create_revision":3,"mod_revision":7,"version":2}]}` + "\n"},
		{"list json keys only", FormatJSON, func(p *Printer) error { return p.List([]*metadpb.KeyValue{kvA}, 12, true) },
			`{"revision":12,"kvs":[{"key":"/a","create_revision":3,"mod_revision":7,"version":2}]}` + "\n"},
		{"list json empty", FormatJSON, func(p *Printer) error { return p.List(nil, 12, false) },
			`{"revision":12,"kvs":[]}` + "\n"},
		{"put text", FormatText, func(p *Printer) error { return p.Put(kvA) }, "OK revision=7 version=2\n"},
		{"put json", FormatJSON, func(p *Printer) error { return p.Put(kvA) },
			`{"key":"/a","create_revision":3,"mod_revision":7,"version":2}` + "\n"},
		{"deleted text", FormatText, func(p *Printer) error { return p.Deleted(3) }, "OK deleted=3\n"},
		{"deleted json", FormatJSON, func(p *Printer) error { return p.Deleted(0) }, `{"deleted":0}` + "\n"},
		{"put event text", FormatText, func(p *Printer) error {
			return p.Event(&metadpb.Event{Type: metadpb.Event_PUT, Kv: kvA})
		}, "PUT /a one rev=7\n"},
		{"delete event text", FormatText, func(p *Printer) error {
			return p.Event(&metadpb.Event{Type: metadpb.Event_DELETE, Kv: &metadpb.KeyValue{Key: "/a", ModRevision: 8}})
		}, "DELETE /a rev=8\n"},
		{"put event json", FormatJSON, func(p *Printer) error {
			return p.Event(&metadpb.Event{Type: metadpb.Event_PUT, Kv: kvA})
		}, `{"type":"PUT","key":"/a","value":"one","create_revision":3,"mod_revision":7,"version":2}` + "\n"},
		{"delete event json", FormatJSON, func(p *Printer) error {
			return p.Event(&metadpb.Event{Type: metadpb.Event_DELETE, Kv: &metadpb.KeyValue{Key: "/a", ModRevision: 8}})
		}, `{"type":"DELETE","key":"/a","create_revision":0,"mod_revision":8,"version":0}` + "\n"},
		{"members text", FormatText, func(p *Printer) error {
			return p.Members([]*metadpb.Member{{Id: "1", RaftAddress: "h:7101", ClientAddress: "h:7001", Voter: true}, {Id: "22", RaftAddress: "h:7102"}})
		}, "ID  RAFT ADDRESS  CLIENT ADDRESS  VOTER\n1   h:7101        h:7001          true\n22  h:7102        -               false\n"},
		{"members json", FormatJSON, func(p *Printer) error {
			return p.Members([]*metadpb.Member{{Id: "1", RaftAddress: "h:7101", Voter: true}})
		}, `{"members":[{"id":"1","raft_address":"h:7101","client_address":"","admin_address":"","voter":true}]}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.print(&Printer{W: &b, Format: tc.format}); err != nil {
				t.Fatal(err)
			}
			if got := b.String(); got != tc.want {
				t.Fatalf("got:\n%q\nwant:\n%q", got, tc.want)
			}
		})
	}
}

func TestExitCodes(t *testing.T) {
	failing := func(err error) error { return Run(func(*cobra.Command, []string) error { return err })(nil, nil) }
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		err     error
		code    int
		message string
	}{
		{"success", nil, ExitOK, ""},
		{"usage error from cobra", errors.New("unknown flag: --x"), ExitUsage, "unknown flag: --x"},
		{"runtime error", failing(boom), ExitRuntime, "boom"},
		{"wrapped runtime error", failing(fmt.Errorf("get: %w", boom)), ExitRuntime, "get: boom"},
		{"explicit exit", failing(Exit(2, errors.New("cluster unhealthy"))), ExitUsage, "cluster unhealthy"},
		{"silent exit", failing(Exit(3, nil)), 3, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExitCode(tc.err); got != tc.code {
				t.Errorf("ExitCode = %d, want %d", got, tc.code)
			}
			if got := Message(tc.err); got != tc.message {
				t.Errorf("Message = %q, want %q", got, tc.message)
			}
		})
	}
	if Run(func(*cobra.Command, []string) error { return nil })(nil, nil) != nil {
		t.Error("Run turned success into an error")
	}
}

func TestServerMessage(t *testing.T) {
	st := status.Error(codes.FailedPrecondition, "metad: version conflict")
	wrapped := fmt.Errorf("metaclient: put: %w", st)
	if got := ServerMessage(wrapped); got != "metad: version conflict" {
		t.Errorf("ServerMessage(wrapped status) = %q", got)
	}
	if got := ServerMessage(errors.New("plain")); got != "plain" {
		t.Errorf("ServerMessage(plain) = %q", got)
	}
	if !strings.Contains(ServerMessage(errors.Join(errors.New("x"), st)), "version conflict") {
		t.Error("ServerMessage does not look through joined errors")
	}
}

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		want string
	}{{0, "0 B"}, {512, "512 B"}, {1536, "1.5 KiB"}, {20 << 30, "20.0 GiB"}, {3 << 40, "3.0 TiB"}} {
		if got := Bytes(tc.n); got != tc.want {
			t.Errorf("Bytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
