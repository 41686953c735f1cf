package config

import (
	"errors"
	"fmt"
	"net"

	"github.com/spf13/pflag"
)

// Endpoints are the addresses a node listens on and publishes; every
// role's config embeds it (squashed: its keys are plain flags, listen,
// advertise and admin-listen). metad adds its Raft address beside it.
type Endpoints struct {
	// Listen is the gRPC address.
	Listen string `mapstructure:"listen"`
	// Advertise is the address others are told to dial; Listen when
	// empty.
	Advertise string `mapstructure:"advertise"`
	// AdminListen serves /metrics, /livez, /readyz and, with
	// EnablePprof, /debug/pprof/.
	AdminListen string `mapstructure:"admin-listen"`
}

// EndpointsHelp holds the role's own help texts of --listen and
// --advertise (who dials them differs per role).
type EndpointsHelp struct {
	Listen, Advertise string
}

// adminListenHelp is --admin-listen's help text, the same for every role.
const adminListenHelp = "HTTP address for /metrics, /livez, /readyz (and /debug/pprof/ with --enable-pprof)"

// EndpointsFlags defines the flags of Endpoints with d's values as
// defaults.
func EndpointsFlags(fs *pflag.FlagSet, d Endpoints, help EndpointsHelp) {
	fs.String("listen", d.Listen, help.Listen)
	fs.String("advertise", d.Advertise, help.Advertise)
	fs.String("admin-listen", d.AdminListen, adminListenHelp)
}

// AdvertiseAddress is the address published to others: Advertise, or
// Listen when it is empty.
func (e Endpoints) AdvertiseAddress() string {
	if e.Advertise != "" {
		return e.Advertise
	}
	return e.Listen
}

// Validate checks that Listen and AdminListen are host:port and, when
// reachableBy names who dials the advertised address ("clients",
// "others"), that it is not an unspecified address (0.0.0.0, ::), which
// nobody can dial.
func (e Endpoints) Validate(reachableBy string) error {
	var errs []error
	for _, a := range []struct{ flag, addr string }{{"--listen", e.Listen}, {"--admin-listen", e.AdminListen}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", a.flag, a.addr, err))
		}
	}
	if reachableBy == "" {
		return errors.Join(errs...)
	}
	if host, _, err := net.SplitHostPort(e.AdvertiseAddress()); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			errs = append(errs, fmt.Errorf("--advertise: %q is not reachable by %s; set --advertise", e.AdvertiseAddress(), reachableBy))
		}
	}
	return errors.Join(errs...)
}

// Logging is a node's log output; every role's config embeds it
// (squashed: keys log-level and log-format).
type Logging struct {
	LogLevel  string `mapstructure:"log-level"`
	LogFormat string `mapstructure:"log-format"`
}

// DefaultLogging is info level, text format.
func DefaultLogging() Logging { return Logging{LogLevel: "info", LogFormat: "text"} }

// LoggingFlags defines the flags of Logging with d's values as defaults.
func LoggingFlags(fs *pflag.FlagSet, d Logging) {
	fs.String("log-level", d.LogLevel, "debug, info, warn or error")
	fs.String("log-format", d.LogFormat, "text or json")
}
