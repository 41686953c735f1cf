package netfault

import (
	"encoding/binary"
	"syscall"

	"golang.org/x/sys/unix"
)

// The part of the nfnetlink_queue protocol Delay speaks
// (linux/netfilter/nfnetlink_queue.h). A message is a netlink header
// (native byte order), a 4-byte nfgenmsg (family, version, queue number
// big-endian), then attributes: a 2-byte length and a 2-byte type (native
// byte order), the payload, padding to 4 bytes. Inside the payloads below
// every integer is big-endian.
const (
	nfqnlMsgPacket       = 0 // kernel -> us: a packet waits for a verdict
	nfqnlMsgVerdict      = 1 // us -> kernel: the verdict on one packet
	nfqnlMsgConfig       = 2 // us -> kernel: bind a queue, set its mode
	nfqnlMsgVerdictBatch = 3 // us -> kernel: the verdict on every packet up to an id

	// NFQA_PACKET_HDR: packet id (4), hardware protocol (2), hook (1).
	nfqaPacketHdr = 1
	// NFQA_VERDICT_HDR: verdict (4), packet id (4).
	nfqaVerdictHdr = 2

	// NFQA_CFG_CMD: command (1), padding (1), protocol family (2).
	nfqaCfgCmd = 1
	// NFQA_CFG_PARAMS: copy range (4), copy mode (1).
	nfqaCfgParams = 2

	nfqnlCfgCmdBind = 1
	// nfqnlCopyMeta asks for the packets' metadata without their bytes:
	// a delay only needs the id.
	nfqnlCopyMeta = 1

	nfAccept = 1

	// nlaTypeMask clears the nested and byte-order flags of an attribute
	// type.
	nlaTypeMask = 0x3fff

	nlmsgHeaderLen = 16
	nfgenmsgLen    = 4
)

// nfqMessage encodes an nfnetlink_queue message of type kind for queue.
func nfqMessage(kind uint16, flags uint16, seq uint32, queue uint16, attrs ...[]byte) []byte {
	b := make([]byte, nlmsgHeaderLen, 64)
	b = append(b, unix.AF_UNSPEC, unix.NFNETLINK_V0, byte(queue>>8), byte(queue))
	for _, a := range attrs {
		b = append(b, a...)
	}
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], unix.NFNL_SUBSYS_QUEUE<<8|kind)
	binary.NativeEndian.PutUint16(b[6:], flags)
	binary.NativeEndian.PutUint32(b[8:], seq)
	return b
}

// nlattr encodes one attribute, padded to 4 bytes.
func nlattr(typ uint16, payload []byte) []byte {
	n := 4 + len(payload)
	b := make([]byte, (n+3)&^3)
	binary.NativeEndian.PutUint16(b[0:], uint16(n))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[4:], payload)
	return b
}

// bindMessage binds the socket to queue for IPv4 packets, metadata only.
func bindMessage(queue uint16) []byte {
	return nfqMessage(nfqnlMsgConfig, unix.NLM_F_REQUEST|unix.NLM_F_ACK, 1, queue,
		nlattr(nfqaCfgCmd, []byte{nfqnlCfgCmdBind, 0, 0, unix.AF_INET}),
		nlattr(nfqaCfgParams, []byte{0, 0, 0, 0, nfqnlCopyMeta}))
}

// verdictMessage accepts packet id of queue; with batch, every packet of
// the queue whose id is not after id (in serial-number order) as well.
func verdictMessage(queue uint16, id uint32, batch bool) []byte {
	kind := uint16(nfqnlMsgVerdict)
	if batch {
		kind = nfqnlMsgVerdictBatch
	}
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[0:], nfAccept)
	binary.BigEndian.PutUint32(hdr[4:], id)
	return nfqMessage(kind, unix.NLM_F_REQUEST, 0, queue, nlattr(nfqaVerdictHdr, hdr[:]))
}

// packetIDs returns the ids of the queued packets announced in b, what
// one read of the socket returned. Other messages (errors answering a
// verdict for a packet already gone) are skipped.
func packetIDs(b []byte) []uint32 {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return nil
	}
	var ids []uint32
	for _, m := range msgs {
		if m.Header.Type != unix.NFNL_SUBSYS_QUEUE<<8|nfqnlMsgPacket || len(m.Data) < nfgenmsgLen {
			continue
		}
		attrs := m.Data[nfgenmsgLen:]
		for len(attrs) >= 4 {
			n := int(binary.NativeEndian.Uint16(attrs[0:]))
			typ := binary.NativeEndian.Uint16(attrs[2:]) & nlaTypeMask
			if n < 4 || n > len(attrs) {
				break
			}
			if typ == nfqaPacketHdr && n >= 8 {
				ids = append(ids, binary.BigEndian.Uint32(attrs[4:]))
				break
			}
			attrs = attrs[min((n+3)&^3, len(attrs)):]
		}
	}
	return ids
}

// ackError returns the error carried by the netlink acknowledgement in b;
// found is false when b holds none.
func ackError(b []byte) (found bool, err error) {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return false, err
	}
	for _, m := range msgs {
		if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
			continue
		}
		if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
			return true, syscall.Errno(-errno)
		}
		return true, nil
	}
	return false, nil
}
