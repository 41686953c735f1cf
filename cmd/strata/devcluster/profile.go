package devcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/strata-log/strata/internal/pki"
)

// EnvProfile names the variable that points the CLI at a profile file.
const EnvProfile = "STRATA_PROFILE"

// ErrUntrustedProfile is returned by LoadProfile for a profile in the
// working directory (./.strata/profile.json) that it refuses to use; the
// message says why and how to proceed.
var ErrUntrustedProfile = errors.New("devcluster: untrusted profile")

// maxProfileBytes bounds what LoadProfile reads: a profile is a few
// hundred bytes.
const maxProfileBytes = 64 << 10

// Profile is what the CLI reads when no flags or variables name endpoints.
type Profile struct {
	Metad   string `json:"metad"`
	Brokers string `json:"brokers,omitempty"` // bootstrap brokers, host:port,...
	// TLSCA, TLSCert and TLSKey are the CLI's TLS files (PEM paths) for a
	// cluster with mutual TLS (`strata dev --tls`: an admin certificate).
	TLSCA   string `json:"tls_ca,omitempty"`
	TLSCert string `json:"tls_cert,omitempty"`
	TLSKey  string `json:"tls_key,omitempty"`
}

// TLSFiles are the profile's TLS files (zero: plaintext).
func (p Profile) TLSFiles() pki.Files {
	return pki.Files{CA: p.TLSCA, Cert: p.TLSCert, Key: p.TLSKey}
}

// ProfileFromState builds the profile of a running cluster.
func ProfileFromState(s *State) Profile {
	return Profile{
		Metad:   strings.Join(Endpoints(s.Nodes, RoleMetad), ","),
		Brokers: strings.Join(Endpoints(s.Nodes, RoleBroker), ","),
	}
}

// UserProfilePath is $STRATA_PROFILE, else ~/.config/strata/profile.json.
func UserProfilePath() (string, error) {
	if p := os.Getenv(EnvProfile); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "strata", "profile.json"), nil
}

// WriteProfile writes p to path, creating its directory (0755). The file
// is replaced whole (a new temporary file, then rename), so it always ends
// up 0644 and owned by the writer, whatever an older one was: what
// LoadProfile requires of a working-directory profile. A directory of the
// writer's that others may write to loses that permission (chmod go-w):
// they could replace the profile.
func WriteProfile(path string, p Profile) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if fi, err := os.Lstat(dir); err == nil && fi.IsDir() && fi.Mode().Perm()&0o022 != 0 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Getuid() {
			if err := os.Chmod(dir, fi.Mode().Perm()&^0o022); err != nil {
				return err
			}
		}
	}
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".profile-*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// LoadProfile reads the first profile found: $STRATA_PROFILE, then
// ./.strata/profile.json, then the user's. No profile is not an error.
//
// A profile in the working directory may come from anywhere: a checked-out
// repository, a directory another user made. Like git's safe.directory,
// it is used only when .strata and profile.json are owned by the current
// user, are not symbolic links and others may not write to them; and,
// since `strata dev` runs on loopback only, only when every address it
// names is a loopback one (a repository's own files pass the first test:
// this one keeps a committed profile from sending records elsewhere).
// Otherwise LoadProfile fails with ErrUntrustedProfile, saying why.
// $STRATA_PROFILE and the user's profile are the user's own choice and are
// not checked.
func LoadProfile() (Profile, error) {
	return profileLookup{getenv: os.Getenv, uid: os.Getuid(), userPath: UserProfilePath}.load()
}

// profileLookup is where LoadProfile looks; tests fill in their own.
type profileLookup struct {
	getenv   func(string) string
	workDir  string // "": the process's working directory
	uid      int    // the user a working-directory profile must belong to
	userPath func() (string, error)
}

func (l profileLookup) load() (Profile, error) {
	if p := l.getenv(EnvProfile); p != "" {
		return readProfile(p)
	}
	local := filepath.Join(l.workDir, ".strata", "profile.json")
	p, err := l.readWorkDirProfile(local)
	if !errors.Is(err, fs.ErrNotExist) {
		return p, err
	}
	user, err := l.userPath()
	if err != nil {
		return Profile{}, nil
	}
	p, err = readProfile(user)
	if errors.Is(err, fs.ErrNotExist) {
		return Profile{}, nil
	}
	return p, err
}

// readProfile reads and decodes the profile at path.
func readProfile(path string) (Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Profile{}, err
	}
	return decodeProfile(path, data)
}

func decodeProfile(path string, data []byte) (Profile, error) {
	var p Profile
	if err := json.Unmarshal(data, &p); err != nil {
		return Profile{}, fmt.Errorf("profile %s: %w", path, err)
	}
	return p, nil
}

// readWorkDirProfile reads the working directory's profile at path if it
// passes LoadProfile's checks; an fs.ErrNotExist error when there is
// none. The file's checks are made on the opened file, so that swapping
// it after the check gains nothing.
func (l profileLookup) readWorkDirProfile(path string) (Profile, error) {
	dir := filepath.Dir(path)
	dirInfo, err := os.Lstat(dir)
	if err != nil {
		return Profile{}, err
	}
	if !dirInfo.IsDir() && dirInfo.Mode()&fs.ModeSymlink == 0 {
		return Profile{}, fs.ErrNotExist // a file named .strata: no profile here
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return Profile{}, untrusted(path, "is a symbolic link", true)
	}
	if err != nil {
		return Profile{}, err
	}
	defer f.Close()
	if why := unsafeOwnerOrMode(dirInfo, l.uid); why != "" {
		return Profile{}, untrusted(path, "is in "+dir+", which "+why, true)
	}
	fileInfo, err := f.Stat()
	if err != nil {
		return Profile{}, err
	}
	if !fileInfo.Mode().IsRegular() {
		return Profile{}, untrusted(path, "is not a regular file", false)
	}
	if why := unsafeOwnerOrMode(fileInfo, l.uid); why != "" {
		return Profile{}, untrusted(path, why, true)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxProfileBytes+1))
	if err != nil {
		return Profile{}, err
	}
	if len(data) > maxProfileBytes {
		return Profile{}, untrusted(path, fmt.Sprintf("is larger than %d bytes", maxProfileBytes), false)
	}
	p, err := decodeProfile(path, data)
	if err != nil {
		return Profile{}, err
	}
	for _, list := range []string{p.Metad, p.Brokers} {
		if addr := firstNonLoopback(list); addr != "" {
			return Profile{}, untrusted(path, fmt.Sprintf("names %s, not a loopback address ('strata dev' listens on loopback only)", addr), false)
		}
	}
	return p, nil
}

// unsafeOwnerOrMode says why fi may not be trusted as uid's own ("" when it
// may): a symbolic link, another owner, or writable by group or others.
func unsafeOwnerOrMode(fi fs.FileInfo, uid int) string {
	if fi.Mode()&fs.ModeSymlink != 0 {
		return "is a symbolic link"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid {
		return fmt.Sprintf("is owned by uid %d, not by you (uid %d)", st.Uid, uid)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Sprintf("is writable by group or others (mode %04o)", perm)
	}
	return ""
}

// firstNonLoopback returns the first address of a host:port,... list whose
// host is not a loopback one ("localhost" or a loopback IP), or "".
func firstNonLoopback(list string) string {
	for _, addr := range strings.Split(list, ",") {
		addr = strings.TrimSpace(addr)
		if addr == "" {
			continue
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		if strings.EqualFold(host, "localhost") {
			continue
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			continue
		}
		return addr
	}
	return ""
}

// untrusted is the error for the working-directory profile at path: why
// it is refused, and how to proceed (permissions: whether fixing owner and
// modes would do).
func untrusted(path, why string, permissions bool) error {
	fix := "or edit or remove it"
	if permissions {
		dir := filepath.Dir(path)
		fix = fmt.Sprintf("or, if it is yours, fix it: 'chown $USER %[1]s %[2]s && chmod go-w %[1]s %[2]s' "+
			"(neither may be a symbolic link)", dir, path)
	}
	return fmt.Errorf("%w: %s %s; a profile in the working directory may come from a repository or another user, "+
		"so it is not used. Name the cluster instead with --broker and --metad "+
		"($STRATA_BROKER and $STRATA_METAD, or $%s=FILE), %s",
		ErrUntrustedProfile, path, why, EnvProfile, fix)
}
