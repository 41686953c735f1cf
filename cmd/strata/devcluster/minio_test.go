package devcluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeBin makes dir/name, executable unless mode says otherwise, and
// returns its path.
func fakeBin(t *testing.T, dir, name string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFindMinIO(t *testing.T) {
	root := t.TempDir()
	binDir := filepath.Join(root, "bin")        // the role binaries
	pathDir := filepath.Join(root, "path")      // on PATH
	gopath := filepath.Join(root, "gopath")     // $GOPATH
	home := filepath.Join(root, "home")         // $HOME, for $HOME/go
	emptyDir := filepath.Join(root, "empty")    // holds no minio
	notExec := filepath.Join(root, "noexec")    // a minio without x bits
	dirNamed := filepath.Join(root, "dirnamed") // minio is a directory
	for _, d := range []string{binDir, pathDir, emptyDir, filepath.Join(dirNamed, "minio")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fakeBin(t, notExec, "minio", 0o644)
	inPath := fakeBin(t, pathDir, "minio", 0o755)
	inGopath := fakeBin(t, filepath.Join(gopath, "bin"), "minio", 0o755)
	inHome := fakeBin(t, filepath.Join(home, "go", "bin"), "minio", 0o755)

	for _, tc := range []struct {
		name   string
		binDir string
		env    map[string]string
		want   string
	}{
		{"PATH", binDir, map[string]string{"PATH": emptyDir + ":" + pathDir, "GOPATH": gopath}, inPath},
		{"PATH before GOPATH", emptyDir, map[string]string{"PATH": pathDir, "GOPATH": gopath, "HOME": home}, inPath},
		{"GOPATH", binDir, map[string]string{"PATH": emptyDir, "GOPATH": emptyDir + ":" + gopath, "HOME": home}, inGopath},
		{"HOME/go when GOPATH is unset", binDir, map[string]string{"PATH": emptyDir, "HOME": home}, inHome},
		{"GOPATH set: HOME/go not used", binDir, map[string]string{"PATH": emptyDir, "GOPATH": emptyDir, "HOME": home}, ""},
		{"not executable, a directory", binDir, map[string]string{"PATH": notExec + ":" + dirNamed, "GOPATH": emptyDir}, ""},
		{"relative PATH entries ignored", binDir, map[string]string{"PATH": "path", "GOPATH": emptyDir}, ""},
		{"none", binDir, map[string]string{"PATH": emptyDir, "GOPATH": emptyDir}, ""},
		{"nothing set", binDir, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(root) // so that the relative PATH entry would find path/minio
			if got := FindMinIO(tc.binDir, func(k string) string { return tc.env[k] }); got != tc.want {
				t.Fatalf("FindMinIO = %q, want %q", got, tc.want)
			}
		})
	}

	// Beside the role binaries comes first.
	inBinDir := fakeBin(t, binDir, "minio", 0o755)
	if got := FindMinIO(binDir, func(k string) string { return map[string]string{"PATH": pathDir}[k] }); got != inBinDir {
		t.Fatalf("FindMinIO = %q, want the one in the bin dir %q", got, inBinDir)
	}
}

// TestPlanMinIO plans a cluster with and without a minio binary found by
// FindMinIO: with one, MinIO runs as a node and the brokers tier to its
// bucket with the credentials in their environment; without, they tier to
// DIR/tier.
func TestPlanMinIO(t *testing.T) {
	root := t.TempDir()
	minioBin := fakeBin(t, filepath.Join(root, "bin"), "minio", 0o755)
	dir := filepath.Join(root, "dev")

	o := DefaultOptions()
	o.Dir, o.BinDir, o.MetadPort, o.BookiePort, o.BrokerPort, o.MinIOPort = dir, filepath.Join(root, "bin"), 20001, 20301, 20501, 20701
	o.MinIO = FindMinIO(o.BinDir, func(string) string { return "" })
	if o.MinIO != minioBin {
		t.Fatalf("FindMinIO = %q, want %q", o.MinIO, minioBin)
	}
	nodes, err := Plan(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 9 {
		t.Fatalf("%d nodes, want 3 metad, 3 bookies, minio, 2 brokers", len(nodes))
	}
	m := nodes[6]
	if m.Name != "minio" || m.Role != RoleMinIO || m.Bin != minioBin || m.Listen != "127.0.0.1:20701" || m.Admin != "127.0.0.1:20702" ||
		m.DataDir != filepath.Join(dir, "minio") || m.LogFile != filepath.Join(dir, "logs", "minio.log") {
		t.Fatalf("minio planned as %+v", m)
	}
	if got, want := strings.Join(m.Args, " "), "server "+filepath.Join(dir, "minio")+
		" --address 127.0.0.1:20701 --console-address 127.0.0.1:20702 --quiet"; got != want {
		t.Fatalf("minio args %q, want %q", got, want)
	}
	if !slices.Contains(m.Env, "MINIO_ROOT_USER="+minIOUser) || !slices.Contains(m.Env, "MINIO_ROOT_PASSWORD="+minIOPassword) {
		t.Fatalf("minio env %q", m.Env)
	}
	const store = "s3://strata/dev?endpoint=127.0.0.1:20701&insecure=true"
	for _, k := range nodes[7:] {
		args := strings.Join(k.Args, " ")
		if k.Role != RoleBroker || !strings.HasSuffix(args, " --tier-store "+store) {
			t.Fatalf("%s args %q, want --tier-store %s", k.Name, args, store)
		}
		if !slices.Contains(k.Env, "AWS_ACCESS_KEY_ID="+minIOUser) || !slices.Contains(k.Env, "AWS_SECRET_ACCESS_KEY="+minIOPassword) {
			t.Fatalf("%s env %q", k.Name, k.Env)
		}
	}
	for _, n := range nodes {
		if strings.Contains(strings.Join(n.Args, " "), minIOPassword) {
			t.Fatalf("%s has the password in its arguments (visible in ps): %q", n.Name, n.Args)
		}
		if n.Role != RoleMinIO && n.Role != RoleBroker && len(n.Env) != 0 {
			t.Fatalf("%s gets env %q", n.Name, n.Env)
		}
	}
	// MinIO's ports are checked only when it runs, and it runs only for
	// brokers.
	o.MinIOPort = 65535
	if _, err := Plan(o); err == nil {
		t.Fatal("Plan accepted --minio-port 65535 (console on 65536)")
	}
	o.Brokers = 0
	if nodes, err := Plan(o); err != nil || len(nodes) != 6 {
		t.Fatalf("without brokers: %d nodes, %v; want 6 (no minio)", len(nodes), err)
	}
	o.Brokers, o.MinIOPort = 2, 20701

	// Without a binary: no MinIO node; brokers tier to DIR/tier, no env.
	o.MinIO = FindMinIO(filepath.Join(root, "empty"), func(string) string { return "" })
	if o.MinIO != "" {
		t.Fatalf("FindMinIO found %q in an empty directory", o.MinIO)
	}
	nodes, err = Plan(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 8 || len(Endpoints(nodes, RoleMinIO)) != 0 {
		t.Fatalf("%d nodes (%v minio), want 8 without minio", len(nodes), Endpoints(nodes, RoleMinIO))
	}
	store2, err := TierStore(o)
	if err != nil || store2 != "file://"+filepath.Join(dir, "tier") {
		t.Fatalf("TierStore = %q, %v; want file://%s", store2, err, filepath.Join(dir, "tier"))
	}
	for _, k := range nodes[6:] {
		if !strings.HasSuffix(strings.Join(k.Args, " "), " --tier-store "+store2) || hasCredentials(k.Env) {
			t.Fatalf("%s planned as %+v", k.Name, k)
		}
	}
}
