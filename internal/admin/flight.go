package admin

import (
	"io"
	"net/http"
	"runtime/trace"
	"sync"
	"time"
)

// The flight recorder: with pprof on, a process keeps the last seconds of
// its execution trace (runtime/trace.FlightRecorder) and serves them at
// /debug/pprof/flight, so that a latency spike can be examined after it
// happened (`go tool trace`): which goroutines ran, waited for a core,
// sat in system calls or collected garbage in those seconds. It costs a
// few percent of CPU while it runs, hence pprof's switch.
const (
	// FlightWindow is about how much of the past a flight trace holds.
	FlightWindow   = 5 * time.Second
	flightMaxBytes = 64 << 20
)

var flight struct {
	once sync.Once
	fr   *trace.FlightRecorder
	err  error
	mu   sync.Mutex // one WriteTo at a time
}

// StartFlight starts this process's flight recorder (once; it runs until
// the process exits).
func StartFlight() error {
	flight.once.Do(func() {
		fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: FlightWindow, MaxBytes: flightMaxBytes})
		if err := fr.Start(); err != nil {
			flight.err = err
			return
		}
		flight.fr = fr
	})
	return flight.err
}

// WriteFlight writes the flight recorder's window to w, starting the
// recorder if it was not (then the window is empty).
func WriteFlight(w io.Writer) error {
	if err := StartFlight(); err != nil {
		return err
	}
	flight.mu.Lock()
	defer flight.mu.Unlock()
	_, err := flight.fr.WriteTo(w)
	return err
}

// serveFlight answers /debug/pprof/flight with the flight trace.
func serveFlight(w http.ResponseWriter, _ *http.Request) {
	if err := StartFlight(); err != nil {
		http.Error(w, "flight recorder: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="flight.trace"`)
	// A failure after the first bytes cannot change the status: the
	// trace is cut short, which go tool trace reports.
	_ = WriteFlight(w)
}
