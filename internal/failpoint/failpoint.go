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
//	stop   the process sends itself SIGSTOP (paused, as a long GC pause
//	       or a frozen VM: a test resumes it with SIGCONT); the failpoint
//	       fires once, so a resumed process goes on past it
//
// Several failpoints are separated by commas: a=kill,b=kill.
package failpoint

import (
	"os"
	"os/signal"
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
	switch actions[name] {
	case "kill":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way: never go past the failpoint
	case "stop":
		mu.Lock()
		first := !stopped[name]
		stopped[name] = true
		mu.Unlock()
		if first {
			// SIGSTOP reaches the process a moment after kill returns, so
			// this goroutine could run past the failpoint first: it waits
			// for the SIGCONT that resumes the process.
			cont := make(chan os.Signal, 1)
			signal.Notify(cont, syscall.SIGCONT)
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			<-cont
			signal.Stop(cont)
		}
	}
}

var (
	mu      sync.Mutex
	stopped = map[string]bool{}
)

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
