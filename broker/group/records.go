package group

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/strata-log/strata/proto/brokerpb"
	"github.com/strata-log/strata/recordbatch"
)

// Records of __consumer_offsets. Key: brokerpb.GroupRecordKey, proto
// encoded (deterministic). Value: brokerpb.GroupOffsetValue when the key's
// topic is set, brokerpb.GroupMetadataValue when it is empty; a nil value is a
// tombstone (the offset or the whole group was deleted). The topic is
// compacted on the key, so the last record of a key is its value.

var marshal = proto.MarshalOptions{Deterministic: true}

func offsetRecord(group string, tp TopicPartition, v *brokerpb.GroupOffsetValue, timestampMs int64) (recordbatch.Record, error) {
	key := &brokerpb.GroupRecordKey{GroupId: group, Topic: tp.Topic, Partition: tp.Partition}
	if v == nil { // a typed nil is not a nil proto.Message
		return encodeRecord(key, nil, timestampMs)
	}
	return encodeRecord(key, v, timestampMs)
}

func metadataRecord(group string, v *brokerpb.GroupMetadataValue, timestampMs int64) (recordbatch.Record, error) {
	key := &brokerpb.GroupRecordKey{GroupId: group}
	if v == nil {
		return encodeRecord(key, nil, timestampMs)
	}
	return encodeRecord(key, v, timestampMs)
}

func encodeRecord(key *brokerpb.GroupRecordKey, value proto.Message, timestampMs int64) (recordbatch.Record, error) {
	k, err := marshal.Marshal(key)
	if err != nil {
		return recordbatch.Record{}, fmt.Errorf("group: encode key: %w", err)
	}
	r := recordbatch.Record{Key: k, TimestampMs: timestampMs}
	if value != nil {
		v, err := marshal.Marshal(value)
		if err != nil {
			return recordbatch.Record{}, fmt.Errorf("group: encode value: %w", err)
		}
		if v == nil {
			v = []byte{} // an empty message is not a tombstone
		}
		r.Value = v
	}
	return r, nil
}

// decodedRecord is one replayed record: exactly one of offset / metadata is
// set unless it is a tombstone.
type decodedRecord struct {
	key       *brokerpb.GroupRecordKey
	tombstone bool
	offset    *brokerpb.GroupOffsetValue
	metadata  *brokerpb.GroupMetadataValue
}

func decodeRecord(r recordbatch.Record) (decodedRecord, error) {
	var d decodedRecord
	d.key = &brokerpb.GroupRecordKey{}
	if r.Key == nil {
		return d, fmt.Errorf("group: record at offset %d has no key", r.Offset)
	}
	if err := proto.Unmarshal(r.Key, d.key); err != nil {
		return d, fmt.Errorf("group: record at offset %d: key: %w", r.Offset, err)
	}
	if d.key.GroupId == "" {
		return d, fmt.Errorf("group: record at offset %d: empty group id", r.Offset)
	}
	if r.Value == nil {
		d.tombstone = true
		return d, nil
	}
	var err error
	if d.key.Topic == "" {
		d.metadata = &brokerpb.GroupMetadataValue{}
		err = proto.Unmarshal(r.Value, d.metadata)
	} else {
		d.offset = &brokerpb.GroupOffsetValue{}
		err = proto.Unmarshal(r.Value, d.offset)
	}
	if err != nil {
		return d, fmt.Errorf("group: record at offset %d: value: %w", r.Offset, err)
	}
	return d, nil
}
