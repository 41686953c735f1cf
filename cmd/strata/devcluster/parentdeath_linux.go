//go:build linux

package devcluster

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// startTied starts cmd so that the kernel sends it SIGKILL when this
// process dies, however it dies (SIGKILL included): the parent-death
// signal, prctl(PR_SET_PDEATHSIG), which Go sets between fork and exec
// (and which the child keeps across the exec of a binary that is not
// set-user-ID, such as ip for a node in a network namespace).
//
// SIGKILL, not SIGTERM: once this process is gone nobody is left to
// escalate a SIGTERM that a node acts on slowly or not at all (a broker
// draining towards a metad that is stopping too; a node paused with `dev
// kill --signal STOP`, which holds a SIGTERM until SIGCONT but dies of
// SIGKILL); and every node survives SIGKILL by design (`strata dev kill`
// and the chaos suite send it). The orderly stop, SIGTERM in rounds, is
// still what Ctrl-C and SIGTERM to `strata dev` get (Down).
//
// The kernel ties the signal to the thread that forked the child, not to
// the process (golang/go#27505): had a node been forked from an ordinary
// Go thread, it would die whenever that thread exits, which the runtime
// does when any goroutine on it returns while locked to it
// (runtime.LockOSThread without Unlock, in this program or a library).
// So every tied child is forked by one goroutine, locked to its thread
// and never returning: that thread lives, and the children with it, as
// long as this process does.
func startTied(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	forker.once.Do(func() {
		forker.requests = make(chan forkRequest)
		go fork(forker.requests)
	})
	req := forkRequest{cmd: cmd, done: make(chan error, 1)}
	forker.requests <- req
	return <-req.done
}

// forker is the process's one forking goroutine, started on first use.
var forker struct {
	once     sync.Once
	requests chan forkRequest
}

// forkRequest asks the forking goroutine to start cmd; the result of
// cmd.Start comes back on done.
type forkRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// fork starts the commands it is sent, one at a time, from a thread it
// keeps for the life of the process. It has no owner to stop it: the
// thread it holds is the kernel's parent of every tied node, so stopping
// it would kill them; the process is their owner, and this goroutine
// ends with it.
func fork(requests <-chan forkRequest) {
	runtime.LockOSThread() // never unlocked: see startTied
	for req := range requests {
		req.done <- req.cmd.Start()
	}
}
