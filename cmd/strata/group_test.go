package main

import (
	"testing"
	"time"
)

func TestResetOffsetsTarget(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	tests := []struct {
		args      []string
		wantErr   bool
		timestamp int64
		offset    int64
	}{
		{args: []string{"--topic", "t", "--to-earliest"}, timestamp: -2, offset: -1},
		{args: []string{"--topic", "t", "--to-latest"}, timestamp: -1, offset: -1},
		{args: []string{"--topic", "t", "--to-offset", "0"}, offset: 0},
		{args: []string{"--topic", "t", "--to-offset", "42"}, offset: 42},
		{args: []string{"--topic", "t", "--to-datetime", "2026-01-02T14:00:00Z"}, timestamp: now.Add(-time.Hour).UnixMilli(), offset: -1},
		{args: []string{"--topic", "t", "--by-duration", "30m"}, timestamp: now.Add(-30 * time.Minute).UnixMilli(), offset: -1},
		{args: []string{"--topic", "t"}, wantErr: true},
		{args: []string{"--topic", "t", "--to-earliest", "--to-latest"}, wantErr: true},
		{args: []string{"--to-earliest"}, wantErr: true},
		{args: []string{"--topic", "t", "--to-offset", "-3"}, wantErr: true},
		{args: []string{"--topic", "t", "--by-duration", "0s"}, wantErr: true},
		{args: []string{"--topic", "t", "--to-datetime", "yesterday"}, wantErr: true},
	}
	for _, tt := range tests {
		cmd, o := resetOffsetsCommand(&globalOptions{})
		if err := cmd.ParseFlags(tt.args); err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		got, err := o.target(cmd, now)
		if (err != nil) != tt.wantErr {
			t.Errorf("%v: err %v, want error %t", tt.args, err, tt.wantErr)
			continue
		}
		if err == nil && (got.timestamp != tt.timestamp || got.offset != tt.offset) {
			t.Errorf("%v: %+v, want timestamp %d offset %d", tt.args, got, tt.timestamp, tt.offset)
		}
	}
}
