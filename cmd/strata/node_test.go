package main

import "testing"

func TestDefaultAdmin(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"", "127.0.0.1:9192"},
		{"garbage", "127.0.0.1:9192"},
		{"0.0.0.0:7201", "127.0.0.1:7201"},
		{":7401", "127.0.0.1:7401"},
		{"[::]:7401", "127.0.0.1:7401"},
		{"10.1.2.3:9192", "10.1.2.3:9192"},
		{"broker-1:9192", "broker-1:9192"},
	} {
		if got := defaultAdmin(tc.env, "127.0.0.1:9192"); got != tc.want {
			t.Errorf("defaultAdmin(%q) = %q, want %q", tc.env, got, tc.want)
		}
	}
}
