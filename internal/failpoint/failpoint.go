// Package failpoint lets tests stop a real process at a chosen step, so a
// crash between two writes can be injected deterministically: a program
// calls Hit("retention.after_cas") where a crash matters, and a test starts
// it with STRATA_FAILPOINTS=retention.after_cas=kill.
//
// The environment is read once, at the first Hit. Unset (production), Hit
// costs one map lookup on an empty map. Actions:
//
//	kill   the process sends itself SIGKILL (as kill -9: no deferred
//	       function, no flush, no clean shutdown)
//
// Several failpoints are separated by commas: a=kill,b=kill.
package failpoint

import (
	"os"
	"strings"
	"sync"
	"syscall"
)

// EnvVar names the environment variable read at the first Hit.
const EnvVar = "STRATA_FAILPOINTS"

var (
	once    sync.Once
	actions map[string]string
)

// Hit runs the action configured for name, if any.
func Hit(name string) {
	once.Do(func() { actions = parse(os.Getenv(EnvVar)) })
	if actions[name] == "kill" {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way: never go past the failpoint
	}
}

// parse reads "a=kill,b=kill".
func parse(spec string) map[string]string {
	out := map[string]string{}
	for _, item := range strings.Split(spec, ",") {
		name, action, ok := strings.Cut(strings.TrimSpace(item), "=")
		if ok && name != "" {
			out[name] = action
		}
	}
	return out
}
