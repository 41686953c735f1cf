package cli

import (
	"os"
	"path/filepath"
	"testing"
)

func TestResolvePassword(t *testing.T) {
	f := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(f, []byte("from-file\nsecond line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file, env, want string
		wantErr         bool
	}{
		{file: f, env: "from-env", want: "from-file"},
		{env: "from-env", want: "from-env"},
		{wantErr: true},
		{file: empty, wantErr: true},
		{file: filepath.Join(t.TempDir(), "missing"), wantErr: true},
	} {
		got, err := ResolvePassword(tc.file, tc.env)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ResolvePassword(%q, %q) = %q, %v", tc.file, tc.env, got, err)
		}
	}
	if p, err := ReadPassword("pw\r\nrest"); err != nil || p != "pw" {
		t.Errorf("ReadPassword: %q %v", p, err)
	}
	if _, err := ReadPassword("\n"); err == nil {
		t.Error("an empty password read")
	}
}
