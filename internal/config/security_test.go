package config

import (
	"errors"
	"strings"
	"testing"
)

func TestSecurityValidate(t *testing.T) {
	for _, s := range []Security{{}, {TLSCertFile: "c", TLSKeyFile: "k", TLSCAFile: "ca"}} {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
	for _, s := range []Security{{TLSCertFile: "c"}, {TLSCertFile: "c", TLSKeyFile: "k"}, {TLSCAFile: "ca"}} {
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "go together") {
			t.Errorf("%+v: %v, want an error", s, err)
		}
	}
	tlsOn := Security{TLSCertFile: "c", TLSKeyFile: "k", TLSCAFile: "ca"}
	withExtras := tlsOn
	withExtras.TLSCRLFile, withExtras.AdminTLS, withExtras.AdminTokenFile = "crl", true, "token"
	if err := withExtras.Validate(); err != nil {
		t.Errorf("%+v: %v", withExtras, err)
	}
	if f := withExtras.Files(); f.CRL != "crl" {
		t.Errorf("Files %+v: no CRL", f)
	}
	// A token alone is fine (loopback, or behind --insecure); a CRL or
	// admin TLS without certificates is a mistake.
	if err := (Security{AdminTokenFile: "token"}).Validate(); err != nil {
		t.Errorf("a token without TLS: %v", err)
	}
	for _, s := range []Security{{TLSCRLFile: "crl"}, {AdminTLS: true}} {
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "needs --tls-cert-file") {
			t.Errorf("%+v: %v, want an error", s, err)
		}
	}
}

func TestCheckListeners(t *testing.T) {
	tlsOn := Security{TLSCertFile: "c", TLSKeyFile: "k", TLSCAFile: "ca"}
	grpcL := func(addr string) Listener { return Listener{Flag: "listen", Addr: addr, TLSCapable: true} }
	adminL := func(addr string) Listener { return Listener{Flag: "admin-listen", Addr: addr} }
	adminTLS := tlsOn
	adminTLS.AdminTLS = true
	for _, tc := range []struct {
		name string
		sec  Security
		ls   []Listener
		ok   bool
	}{
		{"loopback v4", Security{}, []Listener{grpcL("127.0.0.1:7001"), adminL("127.0.0.2:7201")}, true},
		{"loopback v6", Security{}, []Listener{grpcL("[::1]:7001")}, true},
		{"localhost", Security{}, []Listener{grpcL("localhost:7001")}, true},
		{"off", Security{}, []Listener{adminL("")}, true},
		{"every interface", Security{}, []Listener{grpcL("0.0.0.0:7001")}, false},
		{"empty host", Security{}, []Listener{grpcL(":7001")}, false},
		{"v6 any", Security{}, []Listener{grpcL("[::]:7001")}, false},
		{"private address", Security{}, []Listener{grpcL("10.1.2.3:7001")}, false},
		{"unresolvable name", Security{}, []Listener{grpcL("no-such-host.invalid:7001")}, false},
		{"insecure", Security{Insecure: true}, []Listener{grpcL("0.0.0.0:7001"), adminL("0.0.0.0:7201")}, true},
		{"tls covers gRPC", tlsOn, []Listener{grpcL("0.0.0.0:7001"), adminL("127.0.0.1:7201")}, true},
		{"tls does not cover admin HTTP", tlsOn, []Listener{grpcL("0.0.0.0:7001"), adminL("0.0.0.0:7201")}, false},
		{"admin TLS covers admin HTTP", adminTLS, []Listener{grpcL("0.0.0.0:7001"), adminL("0.0.0.0:7201")}, true},
		{"admin TLS needs TLS", Security{AdminTLS: true}, []Listener{adminL("0.0.0.0:7201")}, false},
	} {
		err := tc.sec.CheckListeners(tc.ls...)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInsecureListener)) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if err != nil && !strings.Contains(err.Error(), "--insecure") {
			t.Errorf("%s: %q does not say how to proceed", tc.name, err)
		}
	}
}
