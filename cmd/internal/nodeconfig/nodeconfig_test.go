package nodeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type testConfig struct {
	DataDir string        `mapstructure:"data-dir"`
	Listen  string        `mapstructure:"listen"`
	Timeout time.Duration `mapstructure:"timeout"`
	Peers   string        `mapstructure:"peers"`
}

func newFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String(FileFlag, "", "")
	fs.String("data-dir", "default-dir", "")
	fs.String("listen", "127.0.0.1:1", "")
	fs.Duration("timeout", time.Second, "")
	fs.String("peers", "", "")
	return fs
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("data-dir: from-file\nlisten: file:1\ntimeout: 3s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STRATA_LISTEN", "env:2")
	t.Setenv("STRATA_PEERS", "1=a,2=b")
	fs := newFlags()
	if err := fs.Parse([]string{"--config", file, "--peers", "1=flag"}); err != nil {
		t.Fatal(err)
	}
	var c testConfig
	if err := Load(fs, &c); err != nil {
		t.Fatal(err)
	}
	want := testConfig{DataDir: "from-file", Listen: "env:2", Timeout: 3 * time.Second, Peers: "1=flag"}
	if c != want {
		t.Fatalf("got %+v, want %+v", c, want)
	}
}

func TestDefaults(t *testing.T) {
	fs := newFlags()
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	var c testConfig
	if err := Load(fs, &c); err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "default-dir" || c.Timeout != time.Second {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

func TestUnknownFileKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("data-dri: typo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := newFlags()
	if err := fs.Parse([]string{"--config", file}); err != nil {
		t.Fatal(err)
	}
	var c testConfig
	err := Load(fs, &c)
	if err == nil || !strings.Contains(err.Error(), `unknown key "data-dri"`) {
		t.Fatalf("want unknown key error, got %v", err)
	}
}

func TestMissingFile(t *testing.T) {
	fs := newFlags()
	if err := fs.Parse([]string{"--config", "/nonexistent/c.yaml"}); err != nil {
		t.Fatal(err)
	}
	var c testConfig
	if err := Load(fs, &c); err == nil {
		t.Fatal("want error for a missing config file")
	}
}
