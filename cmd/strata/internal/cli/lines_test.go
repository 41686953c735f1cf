package cli

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestLineSplitter(t *testing.T) {
	type kv struct{ key, value *string }
	s := func(v string) *string { return &v }
	for _, tc := range []struct {
		name  string
		split LineSplitter
		line  string
		want  kv
	}{
		{"value only", LineSplitter{}, "hello", kv{nil, s("hello")}},
		{"empty line", LineSplitter{}, "", kv{nil, s("")}},
		{"-K first separator", LineSplitter{KeySeparator: []byte(":")}, "k1:a:b", kv{s("k1"), s("a:b")}},
		{"-K multi-byte", LineSplitter{KeySeparator: []byte("::")}, "k::v", kv{s("k"), s("v")}},
		{"-K missing separator", LineSplitter{KeySeparator: []byte(":")}, "novalue", kv{nil, s("novalue")}},
		{"-K empty value", LineSplitter{KeySeparator: []byte(":")}, "k1:", kv{s("k1"), s("")}},
		{"-K -Z tombstone", LineSplitter{KeySeparator: []byte(":"), NullEmpty: true}, "k1:", kv{s("k1"), nil}},
		{"-K -Z empty key", LineSplitter{KeySeparator: []byte(":"), NullEmpty: true}, ":v", kv{nil, s("v")}},
		{"-K empty key", LineSplitter{KeySeparator: []byte(":")}, ":v", kv{s(""), s("v")}},
		{"-k fixed", LineSplitter{Key: []byte("K")}, "v:1", kv{s("K"), s("v:1")}},
		{"-k -Z tombstone", LineSplitter{Key: []byte("K"), NullEmpty: true}, "", kv{s("K"), nil}},
	} {
		k, v := tc.split.Split([]byte(tc.line))
		check := func(what string, got []byte, want *string) {
			if want == nil {
				if got != nil {
					t.Errorf("%s: %s = %q, want nil", tc.name, what, got)
				}
				return
			}
			if got == nil || string(got) != *want {
				t.Errorf("%s: %s = %q (nil %t), want %q", tc.name, what, got, got == nil, *want)
			}
		}
		check("key", k, tc.want.key)
		check("value", v, tc.want.value)
	}
}

func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", 100<<10) // longer than the reader's buffer
	r := NewLineReader(strings.NewReader("a\n\nb c\n"+long+"\nlast"), 200<<10)
	var got []string
	for {
		line, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(line))
	}
	want := []string{"a", "", "b c", long, "last"}
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("line %d = %.20q, want %.20q", i, got[i], want[i])
		}
	}
	r = NewLineReader(strings.NewReader("ok\n"+long+"\n"), 1000)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); !errors.Is(err, ErrLineTooLong) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("long line: %v", err)
	}
}
