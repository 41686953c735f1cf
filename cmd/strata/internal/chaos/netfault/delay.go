package netfault

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// delayQueueLen is how many packets may wait for their verdict at once:
// the kernel's default queue length, beyond which it drops.
const delayQueueLen = 1024

// delayer holds the packets of one NFQUEUE for a fixed time each. One
// goroutine reads the packets' ids from the queue's netlink socket, another
// lets each through once it has waited long enough. All packets wait the
// same time, so first in is first out and order is kept.
type delayer struct {
	file     *os.File
	queue    uint16
	delay    atomic.Int64 // nanoseconds
	lastID   atomic.Uint32
	packets  chan queuedPacket // read -> release; bounded like the kernel's queue
	stop     chan struct{}
	released chan struct{} // closed when release returns
	done     sync.WaitGroup
}

// queuedPacket is a packet the kernel holds until its verdict.
type queuedPacket struct {
	id uint32
	at time.Time
}

// newDelayer binds the queue of the calling thread's network namespace and
// starts delaying its packets by d. Packets only reach the queue once a
// rule sends them there.
func newDelayer(queue uint16, d time.Duration) (*delayer, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netfault: nfqueue socket: %w", err)
	}
	if err := bindQueue(fd, queue); err != nil {
		unix.Close(fd)
		return nil, err
	}
	dl := &delayer{
		// A non-blocking descriptor makes the file pollable, so close
		// wakes a read blocked on it.
		file:     os.NewFile(uintptr(fd), "nfqueue"),
		queue:    queue,
		packets:  make(chan queuedPacket, delayQueueLen),
		stop:     make(chan struct{}),
		released: make(chan struct{}),
	}
	dl.delay.Store(int64(d))
	dl.done.Add(2)
	go dl.read()
	go dl.release()
	return dl, nil
}

// bindQueue binds the netlink socket fd to queue and makes it
// non-blocking.
func bindQueue(fd int, queue uint16) error {
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netfault: nfqueue bind: %w", err)
	}
	// A larger receive buffer rides out bursts; if the kernel refuses, a
	// burst that overflows the default loses packets, which TCP resends.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
	timeout := unix.Timeval{Sec: 5}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &timeout); err != nil {
		return fmt.Errorf("netfault: nfqueue: %w", err)
	}
	if err := unix.Sendto(fd, bindMessage(queue), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netfault: nfqueue bind queue %d: %w", queue, err)
	}
	buf := make([]byte, 4096)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("netfault: nfqueue bind queue %d: %w", queue, err)
		}
		if found, err := ackError(buf[:n]); err != nil {
			return fmt.Errorf("netfault: nfqueue bind queue %d: %w", queue, err)
		} else if found {
			break
		}
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return fmt.Errorf("netfault: nfqueue: %w", err)
	}
	return nil
}

// read hands the id of every packet queued to release.
func (dl *delayer) read() {
	defer dl.done.Done()
	buf := make([]byte, 1<<16)
	for {
		n, err := dl.file.Read(buf)
		if errors.Is(err, unix.ENOBUFS) {
			// The socket overflowed; the kernel dropped the packets it
			// could not announce.
			continue
		}
		if err != nil {
			return // closed
		}
		now := time.Now()
		for _, id := range packetIDs(buf[:n]) {
			dl.lastID.Store(id)
			select {
			case dl.packets <- queuedPacket{id: id, at: now}:
			case <-dl.stop:
				return
			}
		}
	}
}

// release accepts each packet once it has waited the delay.
func (dl *delayer) release() {
	defer dl.done.Done()
	defer close(dl.released)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var p queuedPacket
		select {
		case p = <-dl.packets:
		case <-dl.stop:
			return
		}
		if wait := time.Until(p.at.Add(time.Duration(dl.delay.Load()))); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-dl.stop:
				timer.Stop()
				return
			}
		}
		// A failed write leaves the packet queued; close lets it go.
		_, _ = dl.file.Write(verdictMessage(dl.queue, p.id, false))
	}
}

// setDelay changes the delay of the packets not yet let through.
func (dl *delayer) setDelay(d time.Duration) { dl.delay.Store(int64(d)) }

// close lets every waiting packet through at once and stops. The rule that
// feeds the queue should be gone first; a packet queued after close is
// dropped by the kernel when the socket closes.
func (dl *delayer) close() error {
	close(dl.stop)
	<-dl.released
	// Only read is left, and it only announces packets; a batch verdict
	// 2^30 ids past the last one seen covers every packet still queued.
	_, err := dl.file.Write(verdictMessage(dl.queue, dl.lastID.Load()+1<<30, true))
	err = errors.Join(err, dl.file.Close())
	dl.done.Wait()
	if err != nil {
		return fmt.Errorf("netfault: stopping a delay: %w", err)
	}
	return nil
}
