package benchsuite

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
)

func TestParseVmHWM(t *testing.T) {
	got, err := ParseVmHWM([]byte("Name:\tbroker\nVmPeak:\t 2000 kB\nVmHWM:\t    1536 kB\nVmRSS:\t 1024 kB\n"))
	if err != nil || got != 1536<<10 {
		t.Fatalf("ParseVmHWM = %d, %v; want %d", got, err, 1536<<10)
	}
	for _, bad := range []string{"VmRSS:\t1 kB\n", "VmHWM:\t1 MB\n", "VmHWM:\tx kB\n"} {
		if _, err := ParseVmHWM([]byte(bad)); err == nil {
			t.Errorf("ParseVmHWM(%q): no error", bad)
		}
	}
}

// The peak of this process covers a buffer it touched and freed, and a
// reset brings it back down to what the process holds now.
func TestPeakRSSOfThisProcess(t *testing.T) {
	if _, err := PeakRSS(os.Getpid()); err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	const size = 64 << 20
	func() {
		buf := make([]byte, size)
		for i := 0; i < len(buf); i += 4096 {
			buf[i] = 1
		}
		runtime.KeepAlive(buf)
	}()
	peak, err := PeakRSS(os.Getpid())
	if err != nil || peak < size {
		t.Fatalf("peak %d with %d bytes touched (%v)", peak, size, err)
	}
	debug.FreeOSMemory()
	if err := ResetPeakRSS(os.Getpid()); err != nil {
		t.Skipf("clear_refs not writable here: %v", err)
	}
	after, err := PeakRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The reset brings the peak to what the process holds now. Under
	// -race the freed buffer's shadow memory stays resident, so the peak
	// is compared with the resident size, not with the buffer.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	rss, err := statusKB(status, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	if after > rss+16<<20 {
		t.Fatalf("peak %d after the buffer was freed and the peak reset (resident %d), was %d", after, rss, peak)
	}
}
