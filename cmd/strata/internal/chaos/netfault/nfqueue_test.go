package netfault

import (
	"encoding/binary"
	"encoding/hex"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestVerdictMessage(t *testing.T) {
	le := binary.NativeEndian.Uint16([]byte{1, 0}) == 1
	if !le {
		t.Skip("the expected bytes are little-endian")
	}
	// nlmsghdr: len 32, type 0x0301 (queue subsystem, verdict), flags
	// NLM_F_REQUEST, seq 0, pid 0; nfgenmsg: AF_UNSPEC, version 0, queue 5;
	// attribute: len 12, NFQA_VERDICT_HDR, NF_ACCEPT, id 0x01020304.
	want := "20000000" + "0103" + "0100" + "00000000" + "00000000" +
		"00000005" +
		"0c00" + "0200" + "00000001" + "01020304"
	if got := hex.EncodeToString(verdictMessage(5, 0x01020304, false)); got != want {
		t.Fatalf("verdict\n got %s\nwant %s", got, want)
	}
	if got := verdictMessage(5, 1, true); binary.NativeEndian.Uint16(got[4:]) != 0x0303 {
		t.Fatalf("batch verdict type %#x", binary.NativeEndian.Uint16(got[4:]))
	}
	// bind: command attribute {BIND, 0, AF_INET big-endian}, then params
	// {copy range 0, NFQNL_COPY_META} padded to 12 bytes.
	bind := bindMessage(0)
	if got, want := hex.EncodeToString(bind[20:]), "0800"+"0100"+"01000002"+"0900"+"0200"+"0000000001000000"; got != want {
		t.Fatalf("bind attributes\n got %s\nwant %s", got, want)
	}
	if flags := binary.NativeEndian.Uint16(bind[6:]); flags != unix.NLM_F_REQUEST|unix.NLM_F_ACK {
		t.Fatalf("bind flags %#x", flags)
	}
}

func TestPacketIDs(t *testing.T) {
	packet := func(id uint32) []byte {
		hdr := []byte{0, 0, 0, 0, 0x08, 0x00, 1}
		binary.BigEndian.PutUint32(hdr, id)
		// A mark attribute first, as the kernel may send others before the
		// header; and the header with the byte-order flag set.
		return nfqMessage(nfqnlMsgPacket, 0, 0, 0,
			nlattr(3, []byte{0, 0, 0, 9}),
			nlattr(nfqaPacketHdr|0x4000, hdr))
	}
	b := append(packet(7), packet(8)...)
	b = append(b, verdictMessage(0, 1, false)...) // not a packet: skipped
	if got := packetIDs(b); !slices.Equal(got, []uint32{7, 8}) {
		t.Fatalf("packetIDs = %v", got)
	}
	if got := packetIDs(b[:10]); got != nil {
		t.Fatalf("packetIDs of a torn message = %v", got)
	}
}

func TestAckError(t *testing.T) {
	ack := func(errno int32) []byte {
		b := make([]byte, 16+4+16)
		binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
		binary.NativeEndian.PutUint16(b[4:], unix.NLMSG_ERROR)
		binary.NativeEndian.PutUint32(b[16:], uint32(errno))
		return b
	}
	if found, err := ackError(ack(0)); !found || err != nil {
		t.Fatalf("ack 0: %v, %v", found, err)
	}
	if found, err := ackError(ack(-int32(syscall.EBUSY))); !found || err != syscall.EBUSY {
		t.Fatalf("ack -EBUSY: %v, %v", found, err)
	}
	if found, _ := ackError(verdictMessage(0, 1, false)); found {
		t.Fatal("a verdict read as an ack")
	}
}
