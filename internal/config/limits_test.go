package config

import (
	"strings"
	"testing"
)

func TestLimitsValidate(t *testing.T) {
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := DefaultLimits()
	bad.GRPCMaxConnectionsPerIP, bad.AdminMaxConnections, bad.HandshakeTimeout = 0, -1, 0
	err := bad.Validate()
	for _, flag := range []string{"--grpc-max-connections-per-ip", "--admin-max-connections", "--handshake-timeout"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%v does not name %s", err, flag)
		}
	}
	if err != nil && strings.Contains(err.Error(), "--grpc-max-connections ") {
		t.Errorf("%v names a valid flag", err)
	}
}
