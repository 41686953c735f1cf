package bookie

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/ledger/bookies"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/bookiepb"
)

// Cookie file names in the data directory.
const (
	cookieFile        = "COOKIE"
	pendingCookieFile = "COOKIE.pending"
)

// ErrIdentity is returned when the data directory and metad disagree about who this bookie
// is. The bookie must not start.
var ErrIdentity = errors.New("bookie: identity check failed")

// identityAction is what start-up does about the cookie.
type identityAction int

const (
	identityStart  identityAction = iota // cookies match
	identityCreate                       // new bookie: create the cookie
	identityFinish                       // finish an interrupted creation
)

// localIdentity is what the data directory says.
type localIdentity struct {
	cookie  *bookiepb.Cookie // COOKIE
	pending *bookiepb.Cookie // COOKIE.pending
	hasData bool             // anything besides cookie files
}

// decideIdentity is the table in doc.go: a pure decision over what the disk
// and metad hold.
func decideIdentity(id string, local localIdentity, remote *bookiepb.Cookie) (identityAction, error) {
	what := func(format string, args ...any) error {
		return fmt.Errorf("%w: bookie %s: %s", ErrIdentity, id, fmt.Sprintf(format, args...))
	}
	switch {
	case local.cookie != nil && local.cookie.BookieId != id:
		return 0, what("the data directory belongs to bookie %s (instance %s); start it with --id %s or use an empty directory",
			local.cookie.BookieId, local.cookie.InstanceId, local.cookie.BookieId)
	case local.cookie != nil && remote == nil:
		return 0, what("the data directory has instance %s but metad has no cookie for this id: metad lost it, or the disk comes from another cluster. "+
			"If this disk's data is still wanted, restore the cookie in metad (%s%s); otherwise empty the data directory to start a new bookie",
			local.cookie.InstanceId, bookies.CookiePrefix, id)
	case local.cookie != nil && local.cookie.InstanceId != remote.InstanceId:
		return 0, what("the data directory has instance %s but metad knows this id as instance %s: this disk belongs to another incarnation. "+
			"Use the disk that holds instance %s, or start this one under a new --id", local.cookie.InstanceId, remote.InstanceId, remote.InstanceId)
	case local.cookie != nil:
		return identityStart, nil
	case local.pending != nil && remote != nil && local.pending.InstanceId == remote.InstanceId && local.pending.BookieId == id:
		return identityFinish, nil
	case remote != nil:
		return 0, what("metad knows this id as instance %s (created %s) but the data directory has no cookie: the disk was wiped or replaced, "+
			"so entries this bookie acknowledged are gone from it. Do not reuse the id: start the bookie with a new --id and let "+
			"re-replication restore the copies (after that, 'strata meta del %s%s' retires the old id)",
			remote.InstanceId, time.UnixMilli(remote.CreatedAtMs).UTC().Format(time.RFC3339), bookies.CookiePrefix, id)
	case local.hasData:
		return 0, what("the data directory holds data but no cookie; refusing to adopt it. Use an empty directory")
	}
	return identityCreate, nil
}

// checkIdentity runs the identity check at start-up and returns the cookie
// the bookie runs under. It creates the cookie for a new bookie.
func checkIdentity(ctx context.Context, meta *metaclient.Client, id, dataDir string) (*bookiepb.Cookie, error) {
	local, err := readLocalIdentity(dataDir)
	if err != nil {
		return nil, err
	}
	var remote *bookiepb.Cookie
	kv, err := meta.Get(ctx, bookies.CookiePrefix+id)
	switch {
	case errors.Is(err, metaclient.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("bookie: read cookie from metad: %w", err)
	default:
		remote = &bookiepb.Cookie{}
		if err := proto.Unmarshal(kv.Value, remote); err != nil {
			return nil, fmt.Errorf("bookie: cookie in metad at %s%s is unreadable: %w", bookies.CookiePrefix, id, err)
		}
	}
	action, err := decideIdentity(id, local, remote)
	if err != nil {
		return nil, err
	}
	switch action {
	case identityStart:
		return local.cookie, nil
	case identityFinish:
		return local.pending, finishCookie(dataDir)
	}
	c := &bookiepb.Cookie{BookieId: id, InstanceId: newInstanceID(), CreatedAtMs: time.Now().UnixMilli()}
	if err := writeCookieFile(filepath.Join(dataDir, pendingCookieFile), c); err != nil {
		return nil, err
	}
	value, err := proto.Marshal(c)
	if err != nil {
		return nil, err
	}
	if _, err := meta.Put(ctx, bookies.CookiePrefix+id, value, metaclient.WithExpectedVersion(0)); err != nil {
		return nil, fmt.Errorf("bookie: register cookie in metad: %w", err)
	}
	return c, finishCookie(dataDir)
}

func newInstanceID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

func readLocalIdentity(dataDir string) (localIdentity, error) {
	var local localIdentity
	entries, err := os.ReadDir(dataDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return local, fmt.Errorf("bookie: data dir: %w", err)
	}
	for _, e := range entries {
		switch e.Name() {
		case cookieFile:
			if local.cookie, err = readCookieFile(filepath.Join(dataDir, cookieFile)); err != nil {
				return local, err
			}
		case pendingCookieFile:
			if local.pending, err = readCookieFile(filepath.Join(dataDir, pendingCookieFile)); err != nil {
				return local, err
			}
		default:
			local.hasData = true
		}
	}
	return local, nil
}

func readCookieFile(path string) (*bookiepb.Cookie, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bookie: %w", err)
	}
	c := &bookiepb.Cookie{}
	if err := protojson.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("%w: %s is unreadable: %v", ErrIdentity, path, err)
	}
	return c, nil
}

// writeCookieFile writes c durably: file fsynced, then its directory.
func writeCookieFile(path string, c *bookiepb.Cookie) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := protojson.MarshalOptions{Multiline: true}.Marshal(c)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// finishCookie renames COOKIE.pending to COOKIE durably.
func finishCookie(dataDir string) error {
	if err := os.Rename(filepath.Join(dataDir, pendingCookieFile), filepath.Join(dataDir, cookieFile)); err != nil {
		return fmt.Errorf("bookie: install cookie: %w", err)
	}
	return syncDir(dataDir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
