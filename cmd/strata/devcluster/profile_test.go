package devcluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWorkDirProfileTrust: a profile in the working directory is used only
// when .strata and profile.json are the user's, not symbolic links, not
// writable by others, and name loopback addresses only (a checked-out
// repository must not redirect the CLI to another broker).
func TestWorkDirProfileTrust(t *testing.T) {
	const good = `{"metad": "127.0.0.1:7001,localhost:7002", "brokers": "127.0.0.1:9092,[::1]:9093"}`
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, work string) // work/.strata exists, 0755, with a good profile.json, 0644
		uid     int                             // offset from the real uid
		wantErr string                          // "": the working directory's profile is used
	}{
		{name: "own, 0755 and 0644, loopback"},
		{name: "owner-only modes", setup: func(t *testing.T, work string) {
			chmod(t, filepath.Join(work, ".strata"), 0o700)
			chmod(t, filepath.Join(work, ".strata", "profile.json"), 0o600)
		}},
		{name: "another user's", uid: 1, wantErr: "is owned by uid"},
		{name: "file writable by others", wantErr: "is writable by group or others (mode 0666)", setup: func(t *testing.T, work string) {
			chmod(t, filepath.Join(work, ".strata", "profile.json"), 0o666)
		}},
		{name: "file writable by group", wantErr: "is writable by group or others (mode 0664)", setup: func(t *testing.T, work string) {
			chmod(t, filepath.Join(work, ".strata", "profile.json"), 0o664)
		}},
		{name: "directory writable by others", wantErr: ".strata, which is writable by group or others (mode 0777)", setup: func(t *testing.T, work string) {
			chmod(t, filepath.Join(work, ".strata"), 0o777)
		}},
		{name: "file is a symlink", wantErr: "is a symbolic link", setup: func(t *testing.T, work string) {
			target := filepath.Join(t.TempDir(), "elsewhere.json")
			writeFile(t, target, good, 0o644)
			link := filepath.Join(work, ".strata", "profile.json")
			if err := os.Remove(link); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "directory is a symlink", wantErr: ".strata, which is a symbolic link", setup: func(t *testing.T, work string) {
			elsewhere := filepath.Join(t.TempDir(), "d")
			if err := os.Rename(filepath.Join(work, ".strata"), elsewhere); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere, filepath.Join(work, ".strata")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "remote broker", wantErr: "names 203.0.113.7:9092, not a loopback address", setup: func(t *testing.T, work string) {
			writeFile(t, filepath.Join(work, ".strata", "profile.json"), `{"metad": "127.0.0.1:7001", "brokers": "127.0.0.1:9092, 203.0.113.7:9092"}`, 0o644)
		}},
		{name: "remote metad by name", wantErr: "names evil.example:7001, not a loopback address", setup: func(t *testing.T, work string) {
			writeFile(t, filepath.Join(work, ".strata", "profile.json"), `{"metad": "evil.example:7001"}`, 0o644)
		}},
		{name: "a directory named profile.json", wantErr: "is not a regular file", setup: func(t *testing.T, work string) {
			p := filepath.Join(work, ".strata", "profile.json")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			chmod(t, work, 0o755)
			if err := os.Mkdir(filepath.Join(work, ".strata"), 0o755); err != nil {
				t.Fatal(err)
			}
			chmod(t, filepath.Join(work, ".strata"), 0o755)
			writeFile(t, filepath.Join(work, ".strata", "profile.json"), good, 0o644)
			userProfile := filepath.Join(t.TempDir(), "profile.json")
			writeFile(t, userProfile, `{"metad": "10.0.0.1:7001"}`, 0o644)
			if tc.setup != nil {
				tc.setup(t, work)
			}

			l := profileLookup{getenv: func(string) string { return "" }, workDir: work, uid: os.Getuid() + tc.uid,
				userPath: func() (string, error) { return userProfile, nil }}
			p, err := l.load()
			if tc.wantErr == "" {
				if err != nil || p.Metad != "127.0.0.1:7001,localhost:7002" || p.Brokers != "127.0.0.1:9092,[::1]:9093" {
					t.Fatalf("load: %+v, %v; want the working directory's profile", p, err)
				}
				return
			}
			if !errors.Is(err, ErrUntrustedProfile) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("load: %+v, %v; want ErrUntrustedProfile saying %q", p, err, tc.wantErr)
			}
			// The message says how to proceed.
			for _, want := range []string{"--broker", EnvProfile} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %s", err, want)
				}
			}
			if p != (Profile{}) {
				t.Errorf("refused, yet returned %+v", p)
			}
		})
	}
}

// TestProfileLookupOrder: $STRATA_PROFILE wins and is not checked (the
// user named it); without a working-directory profile the user's is used.
func TestProfileLookupOrder(t *testing.T) {
	work := t.TempDir()
	userProfile := filepath.Join(t.TempDir(), "profile.json")
	writeFile(t, userProfile, `{"metad": "10.0.0.1:7001"}`, 0o644)
	envProfile := filepath.Join(t.TempDir(), "env.json")
	writeFile(t, envProfile, `{"metad": "10.0.0.2:7001"}`, 0o666)
	l := profileLookup{getenv: func(string) string { return "" }, workDir: work, uid: os.Getuid(),
		userPath: func() (string, error) { return userProfile, nil }}

	if p, err := l.load(); err != nil || p.Metad != "10.0.0.1:7001" {
		t.Fatalf("no .strata: %+v, %v; want the user's profile", p, err)
	}
	// A .strata without a profile (or a file named .strata) is no profile.
	writeFile(t, filepath.Join(work, ".strata"), "", 0o644)
	if p, err := l.load(); err != nil || p.Metad != "10.0.0.1:7001" {
		t.Fatalf(".strata is a file: %+v, %v; want the user's profile", p, err)
	}
	// An untrusted working-directory profile does not matter when
	// $STRATA_PROFILE names one.
	if err := os.Remove(filepath.Join(work, ".strata")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(work, ".strata"), 0o777); err != nil {
		t.Fatal(err)
	}
	chmod(t, filepath.Join(work, ".strata"), 0o777)
	writeFile(t, filepath.Join(work, ".strata", "profile.json"), `{"metad": "203.0.113.7:7001"}`, 0o666)
	l.getenv = func(k string) string {
		if k == EnvProfile {
			return envProfile
		}
		return ""
	}
	if p, err := l.load(); err != nil || p.Metad != "10.0.0.2:7001" {
		t.Fatalf("$%s: %+v, %v", EnvProfile, p, err)
	}
	l.getenv = func(string) string { return "" }
	if _, err := l.load(); !errors.Is(err, ErrUntrustedProfile) {
		t.Fatalf("without $%s: %v, want ErrUntrustedProfile", EnvProfile, err)
	}
	if p, err := l.load(); err == nil || p.Metad != "" {
		t.Fatalf("untrusted profile fell through to %+v", p)
	}
}

// TestWriteProfileModes: what `strata dev` writes passes LoadProfile's
// checks even over an older profile, or a directory, that others could
// write to.
func TestWriteProfileModes(t *testing.T) {
	work := t.TempDir()
	dir := filepath.Join(work, ".strata")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	chmod(t, dir, 0o777)
	path := filepath.Join(dir, "profile.json")
	writeFile(t, path, `{"metad": "203.0.113.7:7001"}`, 0o666)

	want := Profile{Metad: "127.0.0.1:7001", Brokers: "127.0.0.1:9092"}
	if err := WriteProfile(path, want); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{dir: 0o755, path: 0o644} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %04o, want %04o", p, fi.Mode().Perm(), mode)
		}
	}
	l := profileLookup{getenv: func(string) string { return "" }, workDir: work, uid: os.Getuid(),
		userPath: func() (string, error) { return "", errors.New("none") }}
	if got, err := l.load(); err != nil || got != want {
		t.Fatalf("load after WriteProfile: %+v, %v; want %+v", got, err, want)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}

	// A new directory and file.
	fresh := filepath.Join(work, "new", ".strata", "profile.json")
	if err := WriteProfile(fresh, want); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("new profile: %v, %v", fi, err)
	}
}

func TestFirstNonLoopback(t *testing.T) {
	for list, want := range map[string]string{
		"":                                 "",
		"127.0.0.1:7001,127.0.0.2:7002":    "",
		"localhost:9092, LOCALHOST:9093":   "",
		"[::1]:9092":                       "",
		"127.0.0.1:9092,10.1.2.3:9092":     "10.1.2.3:9092",
		"localhost.evil.example:9092":      "localhost.evil.example:9092",
		"[::ffff:8.8.8.8]:9092":            "[::ffff:8.8.8.8]:9092",
		"nonsense":                         "nonsense",
		"127.0.0.1.nip.io:9092,[::1]:9092": "127.0.0.1.nip.io:9092",
	} {
		if got := firstNonLoopback(list); got != want {
			t.Errorf("firstNonLoopback(%q) = %q, want %q", list, got, want)
		}
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// writeFile writes data to path with exactly mode (whatever the umask).
func writeFile(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	chmod(t, path, mode)
}
