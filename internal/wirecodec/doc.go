// Package wirecodec is the gRPC codec of every Strata process: protobuf,
// as gRPC's own, except that the messages that carry record data skip
// protobuf's copies of their payloads: ProduceRequest and FetchResponse
// (client and broker), AddRequest and ReadEntryResponse (broker and
// bookie), each in both directions.
//
// gRPC's proto codec copies a received message into one pooled buffer
// and then copies every bytes field out of it, and it copies a sent
// message's bytes fields into the buffer it marshals into. On a broker
// that is five passes over every produced byte besides the network's
// (one per bookie of the write set for the sends). A message type that
// implements AliasUnmarshaler is decoded from one fresh copy of the
// received bytes, which its fields then alias (or, if it embeds Pooled,
// from a copy in a pooled buffer it gives back when done with it: a
// bookie's adds); one that implements
// BuffersMarshaler is sent as a list of buffers that refer to its
// payloads instead of holding copies of them; one that implements
// SliceMarshaler hands gRPC buffers that go back to their pool once gRPC
// has written them (a bookie's read entries, read into pooled memory; a
// broker's fetch response, whose last buffer's release gives back the
// fetch budget its records held).
// Every other message goes through protobuf unchanged.
//
// Invariants:
//
//	W1. The wire format is protobuf's: a message encoded by
//	    MarshalBuffers is byte for byte what proto.Marshal produces (for
//	    an AddRequest, with its payload_tail joined to its payload: the
//	    tail exists so that a writer need not copy an entry to append its
//	    digest tag; for a FetchResponse, with each partition's
//	    records_more joined to its records: a broker need not copy a
//	    fetch's batches into one buffer), and
//	    UnmarshalAlias accepts and rejects what proto.Unmarshal does,
//	    keeping unknown fields (tests compare both on random and fuzzed
//	    input, and check that every field of the descriptor is handled).
//	W2. A payload passed to MarshalBuffers is referenced until gRPC has
//	    written it, after Send returns: it must not be modified after it
//	    is sent. Strata's sent payloads (ledger entries and their tags,
//	    which a ledger writer's caller must not modify once appended, and
//	    a broker's fetched batches, which its tail cache and read buffers
//	    share read-only) are never modified.
//	W3. Bytes decoded by UnmarshalAlias alias a buffer that belongs to
//	    the message alone (never one of gRPC's pooled buffers), so they
//	    stay valid and may be modified like protobuf's own copies.
//
// The buffer pool (BufferPool) is gRPC's tiered pool without zeroing:
// every user of a pooled buffer in gRPC's transport fills it before it
// reads it (frames are read with io.ReadFull, writes track their
// length), so zeroing on every Get was CPU spent for nothing.
package wirecodec
